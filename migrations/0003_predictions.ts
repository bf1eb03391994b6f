import { Effect } from "effect"
import { runScript } from "./statements.js"

/**
 * Clip scoring: when an upload started receiving (so a PUT whose process died can be released),
 * and the indexes the workers and the sweeper read by.
 */
export default Effect.gen(function*() {
  yield* runScript(`
    ALTER TABLE uploads ADD COLUMN receiving_started_at timestamptz;

    CREATE INDEX uploads_receiving ON uploads (receiving_started_at) WHERE status = 'receiving';
    -- files still stored, looked up by the janitor once their job is terminal
    CREATE INDEX uploads_stored_blob ON uploads (prediction_id) WHERE blob_key IS NOT NULL;
    -- landed files waiting for credits (retry start), failed once past the retention period
    CREATE INDEX predictions_awaiting ON predictions (created_at) WHERE status = 'awaiting_upload';
  `)
})
