/**
 * The demo catalog's content, generated deterministically: hook `index` under `seed` is always
 * the same record, whatever else is generated, so a catalog of N hooks is the first N of a
 * larger one and seeding can run in any number of batches.
 *
 * Word choice follows a power law (a few words are very common, most are rare), as in real
 * hook copy, so search is exercised on both kinds of term.
 */
import { derivedHookId } from "./HookRecord.js"
import type { HookRecord } from "./HookRecord.js"
import { type DemoCategory, demoCategories } from "./DemoCategories.js"

export { type DemoCategory, demoCategories } from "./DemoCategories.js"

/** Small, fast, seedable PRNG (mulberry32); good enough for plausible demo data. */
const mulberry32 = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** A per-hook seed: a 32-bit mix of the catalog seed and the index (so any range is reproducible). */
const mixSeed = (seed: number, index: number) => {
  let h = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35)
  h ^= h >>> 16
  h = Math.imul(h, 0x7feb352d)
  h ^= h >>> 15
  h = Math.imul(h, 0x846ca68b)
  h ^= h >>> 16
  return h >>> 0
}

type Rng = () => number

/** An item with a power-law preference for the front of the list (its most common entries). */
const skewed = <A>(rng: Rng, items: ReadonlyArray<A>, skew = 2.2): A => items[Math.floor(items.length * Math.pow(rng(), skew))]
const uniform = <A>(rng: Rng, items: ReadonlyArray<A>): A => items[Math.floor(items.length * rng())]
const between = (rng: Rng, low: number, high: number) => low + (high - low) * rng()
const intBetween = (rng: Rng, low: number, high: number) => Math.floor(between(rng, low, high + 1))
const capitalise = (text: string) => text.charAt(0).toUpperCase() + text.slice(1)

const numbers = ["3", "5", "7", "10", "12", "30"]
const spans = ["3 days", "7 days", "two weeks", "30 days", "a month", "three months", "100 days", "a year", "24 hours", "one weekend"]
const adjectives = ["easiest", "fastest", "cheapest", "laziest", "smartest", "weirdest", "only", "best", "simplest", "most underrated", "most overrated", "quickest"]
const emoji = ["", "", "", "", "", " 😳", " 🔥", " 👀", " 🤯", " 😭", " ✨", " 💸"]
const reactions = ["I'm shocked", "it actually worked", "I wish I knew this sooner", "my life changed", "I can't go back", "it was a disaster", "my friends noticed", "I'm never stopping", "the results surprised me", "I regret nothing"]
const people = ["my mom", "my husband", "my wife", "my boss", "my sister", "my best friend", "my roommate", "my grandma", "my dad", "my coworker", "my therapist", "my dentist", "my landlord", "my neighbour", "my teacher", "my coach"]
const places = ["new york", "london", "paris", "tokyo", "toronto", "sydney", "berlin", "chicago", "seoul", "mexico city", "lisbon", "dubai", "austin", "amsterdam", "barcelona", "singapore", "nashville", "vancouver", "melbourne", "miami", "dublin", "prague", "copenhagen", "istanbul", "bangkok", "cape town", "reykjavik", "marrakesh", "oslo", "vienna", "hanoi", "lima", "bogota", "kyoto", "edinburgh", "montreal", "athens", "budapest", "zurich", "helsinki", "manila", "nairobi", "cairo", "denver", "seattle", "portland", "boston", "atlanta", "phoenix", "san diego"]
const moments = ["at 3am", "before work", "on a sunday", "on my lunch break", "in my car", "at the airport", "in my kitchen", "at the gym", "before bed", "on a plane", "in a hotel room", "at my desk", "on vacation", "at a wedding", "in the rain", "during a blackout", "after a breakup", "on my birthday"]
const objects = ["a notebook", "a mason jar", "a shoebox", "a sticky note", "an old phone", "a whiteboard", "a kitchen timer", "a paper clip", "a binder clip", "a tennis ball", "a yoga mat", "a hair tie", "a spoon", "a rubber band", "a cardboard box", "a shower curtain", "a spray bottle", "a lint roller", "a sock", "a towel", "a pillowcase", "a lemon", "baking soda", "white vinegar", "a toothbrush", "a hanger", "an ice cube tray", "a muffin tin", "a zip bag", "a clothespin", "a mirror", "a candle", "a lunch bag", "a water bottle", "a desk lamp", "a label maker", "a mini fridge", "a laundry basket", "a shower caddy", "a cutting board", "a tote bag", "a pegboard", "a lazy susan", "a key ring", "an envelope", "a jar lid", "a coat hook", "a doormat", "a flashlight", "a bucket"]
const durations = ["60 seconds", "30 seconds", "five minutes", "ten minutes", "one minute", "15 seconds"]

/** Hook line templates: the opening sentence of a short video, in plain English. */
const templates: ReadonlyArray<(rng: Rng, c: DemoCategory) => string> = [
  (r, c) => `Stop scrolling if you want to ${skewed(r, c.goals)}`,
  (r, c) => `I tried ${skewed(r, c.things)} for ${uniform(r, spans)} and ${uniform(r, reactions)}`,
  (r, c) => `Nobody talks about this when it comes to ${skewed(r, c.topics)}`,
  (r, c) => `${uniform(r, numbers)} ${skewed(r, c.topics)} mistakes ${skewed(r, c.people)} make`,
  (r, c) => `The ${uniform(r, adjectives)} way to ${skewed(r, c.goals)}`,
  (r, c) => `Why ${skewed(r, c.people)} are obsessed with ${skewed(r, c.things)}`,
  (r, c) => `POV: you finally figured out ${skewed(r, c.topics)}`,
  (r, c) => `${capitalise(skewed(r, c.things))} changed the way I think about ${skewed(r, c.topics)}`,
  (r, c) => `If you want to ${skewed(r, c.goals)}, watch this`,
  (r, c) => `Don't try ${skewed(r, c.things)} until you see this`,
  (r, c) => `How I learned to ${skewed(r, c.goals)} in ${uniform(r, spans)}`,
  (r, c) => `You're doing ${skewed(r, c.topics)} wrong`,
  (r, c) => `What ${skewed(r, c.people)} don't know about ${skewed(r, c.topics)}`,
  (r, c) => `This is your sign to ${skewed(r, c.goals)}`,
  (r, c) => `${capitalise(skewed(r, c.people))}, this one is for you: ${skewed(r, c.topics)} made simple`,
  (r, c) => `Rating ${skewed(r, c.topics)} tips from 1 to 10`,
  (r, c) => `The ${skewed(r, c.topics)} advice I would give my younger self`,
  (r, c) => `Watch this before you spend another dollar on ${skewed(r, c.topics)}`,
  (r, c) => `Day ${intBetween(r, 1, 365)} of trying to ${skewed(r, c.goals)}`,
  (r, c) => `${uniform(r, numbers)} things I wish I knew about ${skewed(r, c.topics)} sooner`,
  (r, c) => `Is ${skewed(r, c.things)} worth it? Honest review after ${uniform(r, spans)}`,
  (r, c) => `Wait until you see what ${skewed(r, c.things)} did to my ${skewed(r, c.topics)}`,
  (r, c) => `${capitalise(skewed(r, people, 1.4))} thought I was crazy for trying ${skewed(r, c.things)}`,
  (r, c) => `I asked ${skewed(r, people, 1.4)} to rate my ${skewed(r, c.topics)} and ${uniform(r, reactions)}`,
  (r, c) => `The ${skewed(r, c.topics)} hack I learned in ${skewed(r, places, 1.8)}`,
  (r, c) => `What ${skewed(r, c.topics)} looks like in ${skewed(r, places, 1.8)} vs at home`,
  (r, c) => `Use ${skewed(r, objects, 1.6)} to ${skewed(r, c.goals)}`,
  (r, c) => `${capitalise(skewed(r, objects, 1.6))} is the secret to better ${skewed(r, c.topics)}`,
  (r, c) => `${capitalise(uniform(r, c.topics))} in ${uniform(r, durations)}: everything you need`,
  (r, c) => `Here's exactly how to ${skewed(r, c.goals)} ${uniform(r, moments)}`,
  (r, c) => `Things I do ${uniform(r, moments)} to ${skewed(r, c.goals)}`,
  (r, c) => `My ${uniform(r, adjectives)} ${skewed(r, c.topics)} routine, no gatekeeping`,
  (r, c) => `Unpopular opinion: ${skewed(r, c.things)} is overrated`,
  (r, c) => `The truth about ${skewed(r, c.things)} that influencers won't tell you`,
  (r, c) => `Reacting to the worst ${skewed(r, c.topics)} advice on the internet`,
  (r, c) => `${capitalise(skewed(r, c.people))} need to hear this about ${skewed(r, c.topics)}`,
  (r, c) => `Save this for the next time you want to ${skewed(r, c.goals)}`,
  (r, c) => `Three questions to ask before you start ${skewed(r, c.things)}`,
  (r, c) => `I was today years old when I learned this ${skewed(r, c.topics)} trick`,
  (r, c) => `Tell me you love ${skewed(r, c.topics)} without telling me`,
  (r, c) => `Ranking every ${skewed(r, c.topics)} trend so you don't have to`,
  (r, c) => `A ${skewed(r, places, 1.8)} local showed me how to ${skewed(r, c.goals)}`,
  (r, c) => `Pack with me for ${skewed(r, places, 1.8)}, ${skewed(r, c.topics)} edition`
]

const platforms = [
  { name: "tiktok", weight: 0.55 },
  { name: "instagram", weight: 0.27 },
  { name: "youtube", weight: 0.15 },
  { name: "facebook", weight: 0.03 }
] as const

const pickPlatform = (rng: Rng) => {
  let roll = rng()
  for (const platform of platforms) {
    if (roll < platform.weight) return platform.name
    roll -= platform.weight
  }
  return platforms[0].name
}

const handles = ["sam", "maya", "leo", "nora", "jay", "ava", "kai", "zoe", "eli", "ruby", "omar", "ines", "theo", "lena", "max", "iris"]
const handleSuffixes = ["cooks", "lifts", "saves", "travels", "explains", "daily", "irl", "hq", "tv", "talks", "codes", "reads"]
const songs = ["original sound", "Espresso", "Feather", "Unwritten", "Levitating", "Mr. Blue Sky", "Ocean Eyes", "Running Up That Hill"]
const commentWords = ["wow", "saving", "trying", "true", "obsessed", "need", "finally", "same", "tutorial", "link", "omg", "helpful", "genius", "relatable", "part 2"]

/** The demo window: publish dates fall within the two years before this instant. */
export const demoCatalogEnd = Date.UTC(2026, 10, 1)
const twoYearsMs = 730 * 24 * 3600 * 1000

export const defaultDemoSeed = 20_260_101

/** Hook number `index` of the demo catalog under `seed`. */
export const demoHook = (index: number, seed: number = defaultDemoSeed): HookRecord => {
  const rng = mulberry32(mixSeed(seed, index))
  const category = uniform(rng, demoCategories)
  const text = uniform(rng, templates)(rng, category) + uniform(rng, emoji)
  const platform = pickPlatform(rng)
  const handle = `${uniform(rng, handles)}${uniform(rng, handleSuffixes)}${intBetween(rng, 1, 999)}`
  const videoNumber = `${7_000_000_000 + index}${String(mixSeed(seed + 1, index) % 1_000_000_000).padStart(9, "0")}`
  const sourceUrl = platform === "tiktok"
    ? `https://www.tiktok.com/@${handle}/video/${videoNumber}`
    : platform === "instagram"
    ? `https://www.instagram.com/reel/${videoNumber}/`
    : platform === "youtube"
    ? `https://www.youtube.com/shorts/${videoNumber}`
    : `https://www.facebook.com/reel/${videoNumber}`
  const id = derivedHookId(platform, sourceUrl)
  const sparse = rng() < 0.04 // a few hooks were scraped with little detail
  const duration = Math.round(between(rng, 6, 90) * 10) / 10
  const views = Math.floor(Math.pow(10, between(rng, 2.5, 7.3)))
  const likes = Math.floor(views * between(rng, 0.01, 0.15))
  const comments = Math.floor(likes * between(rng, 0.005, 0.05))
  const published = rng() < 0.01 ? null : new Date(demoCatalogEnd - Math.floor(rng() * twoYearsMs))
  const emotions = sparse ? null : {
    inspiration: intBetween(rng, 0, 100),
    fear: intBetween(rng, 0, 60),
    curiosity: intBetween(rng, 10, 100),
    satisfaction: intBetween(rng, 0, 100),
    happiness: intBetween(rng, 0, 100),
    anger: intBetween(rng, 0, 40),
    surprise: intBetween(rng, 0, 100)
  }
  const themeCount = sparse ? 0 : intBetween(rng, 2, 5)
  const themes = new Map<string, number>()
  for (let i = 0; i < themeCount; i++) themes.set(skewed(rng, commentWords, 1.5), intBetween(rng, 3, Math.max(4, Math.floor(comments / 10))))
  const topic = skewed(rng, category.topics)
  return {
    id,
    text,
    platform,
    media_type: rng() < 0.03 ? null : rng() < 0.93 ? "video" : "carousel",
    thumbnail_url: rng() < 0.05 ? null : `https://cdn.hookline.example/thumbs/${id.slice(5)}.jpg`,
    category: rng() < 0.02 ? null : category.slug,
    hook_duration_sec: rng() < 0.05 ? null : Math.round(between(rng, 0.8, Math.min(6, duration)) * 10) / 10,
    published_at: published === null ? null : published.toISOString(),
    source_url: sourceUrl,
    caption: sparse ? null : `${text.replace(/ [^\x20-\x7e]+$/, "")} #${category.slug.replace(/-/g, "")} #${topic.replace(/[^a-z0-9]/g, "")} #fyp`,
    duration_sec: sparse ? null : duration,
    summary: sparse ? null : `${/^(8|11|18)/.test(String(Math.round(duration))) ? "An" : "A"} ${Math.round(duration)}-second ${category.name.toLowerCase()} video about ${topic} for ${uniform(rng, category.people)}.`,
    emotions,
    comment_themes: sparse ? null : [...themes].map(([word, count]) => ({ word, count })).sort((a, b) => b.count - a.count),
    metrics: sparse ? null : {
      views,
      likes,
      comments,
      shares: Math.floor(likes * between(rng, 0.01, 0.2)),
      saves: Math.floor(likes * between(rng, 0.02, 0.3)),
      engagement_rate: Math.round((likes + comments) / views * 10_000) / 10_000
    },
    creator: sparse ? null : { handle: `@${handle}`, followers: Math.floor(Math.pow(10, between(rng, 3, 7))), verified: rng() < 0.08 },
    audio: sparse || rng() < 0.2 ? null : { title: skewed(rng, songs, 1.6), original: rng() < 0.4 }
  }
}
