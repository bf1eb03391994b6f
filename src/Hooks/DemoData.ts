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

export interface DemoCategory {
  readonly slug: string
  readonly name: string
  /** Topics people make hooks about, most common first. */
  readonly topics: ReadonlyArray<string>
  /** Goals a viewer wants ("save money"), most common first. */
  readonly goals: ReadonlyArray<string>
  /** Things a creator tried or bought, most common first. */
  readonly things: ReadonlyArray<string>
  /** Who the hook speaks to. */
  readonly people: ReadonlyArray<string>
}

export const demoCategories: ReadonlyArray<DemoCategory> = [
  {
    slug: "personal-finance",
    name: "Personal Finance",
    topics: ["money", "saving", "budgeting", "credit cards", "investing", "debt", "taxes", "rent", "retirement", "index funds", "credit score", "emergency funds", "side income", "frugal living", "compound interest", "student loans", "mortgages", "crypto", "dividends", "sinking funds"],
    goals: ["save money", "pay off debt", "build wealth", "retire early", "stop living paycheck to paycheck", "save $10,000 this year", "raise your credit score", "invest your first $1,000", "stop overspending", "buy a house"],
    things: ["the 50/30/20 budget", "a no-spend month", "cash envelopes", "a high-yield savings account", "a budgeting app", "index funds", "the debt snowball", "a roth ira", "coupon stacking", "a spending freeze"],
    people: ["people in their 20s", "broke college students", "new parents", "millennials", "first-time buyers", "freelancers"]
  },
  {
    slug: "fitness",
    name: "Fitness",
    topics: ["workouts", "protein", "running", "abs", "glutes", "stretching", "weight loss", "muscle", "cardio", "push-ups", "squats", "pilates", "mobility", "kettlebells", "deadlifts", "recovery", "creatine", "marathons", "calisthenics", "posture"],
    goals: ["lose belly fat", "build muscle", "run faster", "get stronger", "do your first pull-up", "fix your posture", "lose weight without the gym", "get abs", "touch your toes", "stay consistent"],
    things: ["a 10-minute workout", "walking 10,000 steps a day", "a 30-day plank challenge", "cold plunges", "a pilates routine", "creatine", "a kettlebell routine", "running every morning", "a protein diet", "hot girl walks"],
    people: ["beginners", "busy moms", "people over 40", "desk workers", "runners", "gym girls"]
  },
  {
    slug: "food-cooking",
    name: "Food & Cooking",
    topics: ["recipes", "dinner", "meal prep", "pasta", "chicken", "breakfast", "baking", "coffee", "air fryer", "snacks", "sourdough", "salads", "desserts", "soup", "rice", "tacos", "smoothies", "ramen", "brunch", "cast iron"],
    goals: ["cook dinner in 15 minutes", "meal prep for the week", "eat healthy on a budget", "make restaurant pasta at home", "bake the perfect cookie", "stop wasting food", "cook like a chef", "make crispy chicken"],
    things: ["this air fryer recipe", "a one-pot pasta", "overnight oats", "a sourdough starter", "this viral feta pasta", "a cast iron skillet", "homemade ramen", "a $5 dinner", "cottage cheese ice cream", "a rice cooker hack"],
    people: ["lazy cooks", "college students", "picky eaters", "busy families", "home bakers", "foodies"]
  },
  {
    slug: "beauty-style",
    name: "Beauty & Style",
    topics: ["skincare", "makeup", "hair", "outfits", "nails", "sunscreen", "acne", "fragrance", "curly hair", "lipstick", "eyeliner", "serums", "retinol", "thrifting", "capsule wardrobes", "brows", "lashes", "perfume", "sneakers", "jewelry"],
    goals: ["get clear skin", "look expensive on a budget", "do a five-minute makeup look", "grow your hair", "find your colour season", "dress better", "stop breakouts", "make your perfume last"],
    things: ["this $8 serum", "a drugstore foundation", "slugging", "a silk pillowcase", "retinol", "a capsule wardrobe", "this thrift haul", "a gua sha", "rice water", "a 3-step skincare routine"],
    people: ["girls with oily skin", "short girls", "guys", "people with curly hair", "beauty lovers", "teens"]
  },
  {
    slug: "tech-gadgets",
    name: "Tech & Gadgets",
    topics: ["iphone", "apps", "ai", "laptops", "chatgpt", "android", "headphones", "smart home", "coding", "passwords", "keyboards", "cameras", "excel", "shortcuts", "privacy", "gaming pcs", "tablets", "smartwatches", "chargers", "wifi"],
    goals: ["save hours every week", "protect your privacy", "take better photos", "fix slow wifi", "learn to code", "use ai at work", "make your battery last", "automate boring tasks"],
    things: ["this hidden iphone feature", "a $30 gadget", "chatgpt", "an excel formula", "a mechanical keyboard", "this free app", "a password manager", "a usb-c hub", "noise cancelling headphones", "a mini pc"],
    people: ["iphone users", "programmers", "students", "android users", "office workers", "gamers"]
  },
  {
    slug: "travel",
    name: "Travel",
    topics: ["flights", "packing", "hotels", "road trips", "europe", "japan", "beaches", "airports", "hostels", "camping", "italy", "mexico", "backpacking", "cruises", "national parks", "visas", "lisbon", "bali", "iceland", "train travel"],
    goals: ["find cheap flights", "pack in a carry-on", "travel for free", "skip airport lines", "travel the world on a budget", "avoid tourist traps", "get upgraded", "plan a road trip"],
    things: ["this flight hack", "a packing cube", "a travel credit card", "hidden city ticketing", "a rail pass", "an airport lounge", "this packing list", "a 10-day itinerary", "a travel pillow", "a hostel"],
    people: ["solo travelers", "families", "digital nomads", "first-time flyers", "couples", "backpackers"]
  },
  {
    slug: "parenting",
    name: "Parenting",
    topics: ["toddlers", "babies", "sleep", "tantrums", "screen time", "school", "teens", "potty training", "bedtime", "picky eating", "siblings", "homework", "daycare", "breastfeeding", "newborns", "lunchboxes", "chores", "play dates", "car seats", "reading"],
    goals: ["get your toddler to sleep", "stop tantrums", "raise confident kids", "make mornings easier", "get kids to eat vegetables", "potty train in three days", "reduce screen time", "get your teen to talk"],
    things: ["this bedtime routine", "a visual schedule", "the 'when then' trick", "a white noise machine", "a chore chart", "gentle parenting", "a busy box", "this lunchbox idea", "a sticker chart", "a toddler tower"],
    people: ["new moms", "dads", "parents of toddlers", "teachers", "tired parents", "working parents"]
  },
  {
    slug: "relationships",
    name: "Relationships",
    topics: ["dating", "marriage", "friendship", "texting", "breakups", "red flags", "first dates", "communication", "boundaries", "attachment styles", "love languages", "dating apps", "situationships", "exes", "weddings", "anniversaries", "long distance", "in-laws", "jealousy", "flirting"],
    goals: ["get over a breakup", "spot red flags early", "make friends as an adult", "keep the spark alive", "set boundaries", "stop overthinking texts", "find the one", "fight fair"],
    things: ["this one question", "the 5-second rule", "a date night jar", "this text", "the 36 questions", "a weekly check-in", "couples therapy", "a no-contact rule", "a gratitude list", "this conversation starter"],
    people: ["couples", "single people", "introverts", "people pleasers", "husbands", "best friends"]
  },
  {
    slug: "business",
    name: "Business & Side Hustles",
    topics: ["side hustles", "marketing", "sales", "startups", "freelancing", "etsy", "dropshipping", "linkedin", "small business", "branding", "email lists", "pricing", "ugc", "amazon fba", "copywriting", "networking", "negotiation", "resumes", "interviews", "passive income"],
    goals: ["make money online", "get your first client", "quit your 9 to 5", "grow on linkedin", "ask for a raise", "ace your interview", "start a business with $100", "sell on etsy"],
    things: ["this side hustle", "a cold email template", "a landing page", "this pricing trick", "a content calendar", "a print-on-demand shop", "this resume template", "a lead magnet", "ugc videos", "a digital product"],
    people: ["small business owners", "freelancers", "job seekers", "founders", "creators", "managers"]
  },
  {
    slug: "learning",
    name: "Learning & Study",
    topics: ["studying", "exams", "languages", "reading", "memory", "notes", "spanish", "math", "history", "science", "focus", "college", "essays", "flashcards", "grammar", "speed reading", "chess", "psychology", "physics", "geography"],
    goals: ["study less and remember more", "learn a language fast", "ace your exams", "read 50 books a year", "stop procrastinating", "take better notes", "learn anything in 20 hours", "speak confidently"],
    things: ["the feynman technique", "spaced repetition", "the pomodoro method", "anki flashcards", "this note-taking system", "active recall", "a memory palace", "this study playlist", "a reading tracker", "blurting"],
    people: ["students", "language learners", "med students", "lifelong learners", "teachers", "nerds"]
  },
  {
    slug: "comedy",
    name: "Comedy",
    topics: ["roommates", "office life", "family dinners", "group chats", "mondays", "customer service", "siblings", "road rage", "moms", "cats", "dogs", "weddings", "gym bros", "first days", "zoom calls", "landlords", "grandparents", "airports", "karaoke", "self-checkout"],
    goals: ["survive a family dinner", "get out of a group chat", "leave a party early", "pretend to be busy at work", "avoid your neighbour", "win an argument with your mom"],
    things: ["this prank", "my cat", "my dad's new hobby", "a fake phone call", "my roommate's cooking", "a self-checkout machine", "my grandma's phone", "a reply-all email", "a dog costume", "my boss's zoom background"],
    people: ["older siblings", "introverts", "customer service workers", "cat owners", "dog parents", "millennials"]
  },
  {
    slug: "productivity",
    name: "Productivity",
    topics: ["habits", "morning routines", "focus", "time management", "journaling", "notion", "goals", "motivation", "discipline", "to-do lists", "calendars", "deep work", "minimalism", "burnout", "sleep", "planning", "self-improvement", "dopamine", "screen time", "routines"],
    goals: ["wake up at 5am", "stop procrastinating", "build better habits", "get more done in less time", "stay focused", "plan your week", "beat burnout", "stick to your goals"],
    things: ["a 5am morning routine", "time blocking", "this notion template", "a dopamine detox", "the 2-minute rule", "a habit tracker", "a weekly reset", "the eisenhower matrix", "a digital detox", "journaling every night"],
    people: ["procrastinators", "students", "entrepreneurs", "people with adhd", "night owls", "remote workers"]
  },
  {
    slug: "health-wellness",
    name: "Health & Wellness",
    topics: ["sleep", "anxiety", "stress", "gut health", "hydration", "vitamins", "meditation", "therapy", "hormones", "magnesium", "caffeine", "inflammation", "breathing", "sunlight", "walking", "blood sugar", "mental health", "fasting", "posture", "headaches"],
    goals: ["fall asleep faster", "calm your anxiety", "have more energy", "fix your gut", "stop sugar cravings", "wake up without an alarm", "feel less stressed", "drink more water"],
    things: ["magnesium", "box breathing", "a cold shower", "morning sunlight", "this sleep trick", "intermittent fasting", "a 10-minute walk after meals", "a gratitude journal", "mouth taping", "cutting caffeine"],
    people: ["anxious people", "women over 30", "night shift workers", "busy professionals", "overthinkers", "people with insomnia"]
  }
]

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
