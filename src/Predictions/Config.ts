/**
 * Clip scoring settings, each from the environment with the contract's value as default
 * (docs/configuration.md). Durations take Effect's duration strings: "15 minutes", "2 seconds".
 */
import { Config, Duration } from "effect"

export const PredictionsConfig = Config.all({
  /** How long an upload link accepts its one file. */
  uploadLinkTtl: Config.Duration("UPLOAD_LINK_TTL").pipe(Config.withDefault(Duration.minutes(15))),
  uploadMaxBytes: Config.Int("UPLOAD_MAX_BYTES").pipe(Config.withDefault(256 * 1024 * 1024)),
  /** A PUT still "receiving" this long after it started belongs to a process that died; its link is released. */
  uploadReceiveTimeout: Config.Duration("UPLOAD_RECEIVE_TIMEOUT").pipe(Config.withDefault(Duration.hours(1))),
  /** Predictions are visible to their key this long after creation. */
  retention: Config.Duration("PREDICTION_RETENTION").pipe(Config.withDefault(Duration.hours(24))),
  /** A job queued longer than this fails with `expired` and is refunded. */
  queueTimeout: Config.Duration("QUEUE_TIMEOUT").pipe(Config.withDefault(Duration.hours(1))),
  /** Claims of one job (a worker that stops heart-beating uses one up). */
  maxAttempts: Config.Int("PREDICTION_MAX_ATTEMPTS").pipe(Config.withDefault(3)),
  workerConcurrency: Config.Int("WORKER_CONCURRENCY").pipe(
    Config.withDefault(Math.max(1, navigator.hardwareConcurrency))
  ),
  /** Workers look for queued jobs this often even without a notification. */
  pollInterval: Config.Duration("WORKER_POLL_INTERVAL").pipe(Config.withDefault(Duration.seconds(2))),
  heartbeatInterval: Config.Duration("HEARTBEAT_INTERVAL").pipe(Config.withDefault(Duration.seconds(5))),
  /** A running job whose heartbeat is older than this is re-queued (or failed after the last attempt). */
  heartbeatTimeout: Config.Duration("HEARTBEAT_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30))),
  sweepInterval: Config.Duration("PREDICTION_SWEEP_INTERVAL").pipe(Config.withDefault(Duration.seconds(10))),
  /** Clips an account may keep landed but unpaid (credits short); over it links and PUTs get 429. */
  unpaidMaxCount: Config.Int("UNPAID_CLIPS_MAX_COUNT").pipe(Config.withDefault(3)),
  /** Bytes of landed-but-unpaid clips an account may keep (two clips of the largest size). */
  unpaidMaxBytes: Config.Int("UNPAID_CLIPS_MAX_BYTES").pipe(Config.withDefault(512 * 1024 * 1024)),
  /** A clip that landed while credits were short is kept this long for retry start, then fails as expired. */
  unpaidRetention: Config.Duration("UNPAID_CLIP_RETENTION").pipe(Config.withDefault(Duration.hours(1))),
  /** Unused, unexpired upload links one key may hold; the link request over it gets 429. */
  pendingUploadsPerKey: Config.Int("PENDING_UPLOADS_PER_KEY").pipe(Config.withDefault(20))
})
export type PredictionsConfig = Config.Success<typeof PredictionsConfig>

export const ScorerConfig = Config.all({
  ffmpegPath: Config.option(Config.String("FFMPEG_PATH")),
  ffprobePath: Config.option(Config.String("FFPROBE_PATH")),
  maxClipDuration: Config.Duration("CLIP_MAX_DURATION").pipe(Config.withDefault(Duration.seconds(180))),
  /** The opening that is analysed: cuts, motion and loudness are measured over it. */
  openingWindow: Config.Duration("SCORER_OPENING_WINDOW").pipe(Config.withDefault(Duration.seconds(10))),
  /** Changes in the first moments (fade-ins, a black first frame) are not cuts. */
  cutSkip: Config.Duration("SCORER_CUT_SKIP").pipe(Config.withDefault(Duration.millis(200))),
  /** ffmpeg scene score (0..1) above which a frame starts a new shot. */
  cutThreshold: Config.Number("SCORER_CUT_THRESHOLD").pipe(Config.withDefault(0.3)),
  /** One ffprobe or ffmpeg run taking longer than this fails the job with analysis_failed. */
  analysisTimeout: Config.Duration("ANALYSIS_TIMEOUT").pipe(Config.withDefault(Duration.minutes(2))),
  /** Frames of the opening analysed at most (10 s at 120 fps); a file packed with tiny frames stops there. */
  maxFrames: Config.Int("SCORER_MAX_FRAMES").pipe(Config.withDefault(1200)),
  /** Frames larger than this many pixels (width × height, from ffprobe) are refused before decoding: unsupported_media. */
  maxPixels: Config.Int("SCORER_MAX_PIXELS").pipe(Config.withDefault(1920 * 1920)),
  /** Threads ffmpeg may use to decode and filter one clip (its own default is one per core). */
  toolThreads: Config.Int("SCORER_TOOL_THREADS").pipe(Config.withDefault(2)),
  /** Address space one ffprobe/ffmpeg run may map (bytes, set with prlimit); past it the tool fails: analysis_failed. */
  toolMemoryBytes: Config.Int("SCORER_TOOL_MEMORY").pipe(Config.withDefault(512 * 1024 * 1024)),
  /** Output one ffprobe/ffmpeg run may print (read as it streams); more stops it: analysis_failed. */
  maxOutputBytes: Config.Int("SCORER_MAX_OUTPUT_BYTES").pipe(Config.withDefault(8 * 1024 * 1024)),
  /** false: the on-screen hook is not read (hook_text null, similar_hooks empty, category null). */
  readText: Config.Boolean("SCORER_READ_TEXT").pipe(Config.withDefault(true)),
  /** Frames of the opening read for on-screen text, at most. */
  textFrames: Config.Int("SCORER_TEXT_FRAMES").pipe(Config.withDefault(3)),
  /** The first frame read; a caption is rarely complete on the very first frame. */
  textFirstFrame: Config.Duration("SCORER_TEXT_FIRST_FRAME").pipe(Config.withDefault(Duration.millis(500))),
  /** Time between the frames read. */
  textFrameSpacing: Config.Duration("SCORER_TEXT_FRAME_SPACING").pipe(Config.withDefault(Duration.seconds(1))),
  /** Reading one clip's frames taking longer than this gives up on the text (the clip still scores). */
  textTimeout: Config.Duration("SCORER_TEXT_TIMEOUT").pipe(Config.withDefault(Duration.seconds(3))),
  /** Words read with a lower confidence (0..1) are dropped. */
  textMinConfidence: Config.Number("SCORER_TEXT_MIN_CONFIDENCE").pipe(Config.withDefault(0.6)),
  /** Frames are read with their shorter side scaled down to this many pixels (never up). */
  textFrameSize: Config.Int("SCORER_TEXT_FRAME_SIZE").pipe(Config.withDefault(540)),
  /** And with their area scaled down to this many pixels: a very wide or tall frame is read small, not long. */
  textFrameArea: Config.Int("SCORER_TEXT_FRAME_AREA").pipe(Config.withDefault(540 * 960))
})
export type ScorerConfig = Config.Success<typeof ScorerConfig>

export const BlobConfig = Config.all({
  /** Set: files go to this S3-compatible bucket; unset: to DATA_DIR/blobs. */
  s3Bucket: Config.option(Config.String("S3_BUCKET")),
  s3Endpoint: Config.option(Config.String("S3_ENDPOINT")),
  s3Region: Config.option(Config.String("S3_REGION")),
  s3AccessKeyId: Config.option(Config.Redacted("S3_ACCESS_KEY_ID")),
  s3SecretAccessKey: Config.option(Config.Redacted("S3_SECRET_ACCESS_KEY")),
  /**
   * presigned: upload_url is a presigned PUT URL on the bucket and a watcher plays the object
   * trigger; proxy: upload_url is this server's /uploads route, which streams into the bucket.
   */
  s3UploadMode: Config.Literals(["presigned", "proxy"], "S3_UPLOAD_MODE").pipe(Config.withDefault("presigned" as const)),
  /** How often the presigned-upload watcher looks for objects that landed. */
  s3WatchInterval: Config.Duration("S3_UPLOAD_WATCH_INTERVAL").pipe(Config.withDefault(Duration.seconds(2)))
})
export type BlobConfig = Config.Success<typeof BlobConfig>
