/**
 * Preloaded into a server process by the outage test (BUN_OPTIONS="--preload …"): on SIGUSR2 it
 * makes the three failures nothing in the process handles (an `'error'` event with no listener,
 * a throw in a timer, a rejected promise nobody awaits), as a broken dependency would.
 */
import { EventEmitter } from "node:events"

process.on("SIGUSR2", () => {
  setTimeout(() => new EventEmitter().emit("error", new Error("forced: an 'error' event with no listener")), 0)
  setTimeout(() => {
    throw new Error("forced: a throw in a timer")
  }, 0)
  void Promise.reject(new Error("forced: a rejection nobody handles"))
})
