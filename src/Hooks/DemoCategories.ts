/**
 * The demo catalog's categories and the words each one's hooks are made of (DemoData.ts
 * generates the hooks from them).
 */

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
