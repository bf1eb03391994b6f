/**
 * The entry (`npm start`, the image's CMD): one server process, or with WEB_CONCURRENCY above 1 a
 * supervisor of that many on one port (src/System/Supervisor.ts), which never loads the server.
 */
import { superviseIfAsked } from "./System/Supervisor.js"

if (!superviseIfAsked()) await import("./ServerMain.js")
