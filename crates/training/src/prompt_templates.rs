//! More training prompts without a network: requests written from templates over topics, skills,
//! programming tasks, sentences to rewrite and word problems, each with one of a few openers, in
//! an order fixed by a seed. Every combination is distinct, so asking for more gives more
//! different prompts (up to [`template_capacity`]).

use crate::schedule::Shuffler;

/// Things to explain, describe or write about.
const TOPICS: &[&str] = &[
    "black holes",
    "photosynthesis",
    "the water cycle",
    "volcanoes",
    "earthquakes",
    "tides",
    "the immune system",
    "vaccines",
    "DNA",
    "evolution",
    "climate change",
    "renewable energy",
    "nuclear power",
    "electric cars",
    "the internet",
    "encryption",
    "artificial intelligence",
    "blockchains",
    "the stock market",
    "inflation",
    "compound interest",
    "credit scores",
    "the Roman Empire",
    "the printing press",
    "the Industrial Revolution",
    "ancient Egypt",
    "the Renaissance",
    "the Silk Road",
    "the Moon landing",
    "the Cold War",
    "democracy",
    "the French Revolution",
    "coral reefs",
    "rainforests",
    "deserts",
    "bees",
    "octopuses",
    "whales",
    "migratory birds",
    "sleep",
    "dreams",
    "memory",
    "habits",
    "stress",
    "meditation",
    "nutrition",
    "vitamins",
    "coffee",
    "tea",
    "chocolate",
    "bread",
    "cheese",
    "jazz",
    "classical music",
    "hip hop",
    "the guitar",
    "the piano",
    "impressionist painting",
    "photography",
    "film noir",
    "video games",
    "chess",
    "football",
    "the Olympic Games",
    "marathons",
    "yoga",
    "gardening",
    "composting",
    "recycling",
    "urban planning",
    "bridges",
    "skyscrapers",
    "trains",
    "airplanes",
    "rockets",
    "satellites",
    "Mars",
    "Jupiter",
    "comets",
    "the Sun",
    "rainbows",
    "lightning",
    "snowflakes",
    "glaciers",
    "rivers",
    "mountains",
    "islands",
    "libraries",
    "museums",
    "languages",
    "writing systems",
    "poetry",
    "fairy tales",
    "mythology",
    "time zones",
    "calendars",
    "maps",
    "money",
    "taxes",
    "remote work",
    "friendship",
    "kindness",
    "curiosity",
    "leadership",
    "teamwork",
    "negotiation",
    "public transport",
    "bicycles",
    "the human heart",
    "the brain",
    "bones",
    "muscles",
    "allergies",
    "fever",
    "antibiotics",
    "microplastics",
    "batteries",
    "magnets",
    "sound",
    "light",
    "gravity",
    "electricity",
    "atoms",
    "chemical reactions",
    "the periodic table",
    "prime numbers",
    "probability",
    "statistics",
    "geometry",
    "infinity",
    "fractals",
];

/// General requests about a topic.
const TOPIC_TASKS: &[&str] = &[
    "Explain {} to a ten-year-old.",
    "What is {} and why does it matter?",
    "List five surprising facts about {}.",
    "Write a short poem about {}.",
    "Write a haiku about {}.",
    "Tell me a short story in which {} plays a key part.",
    "Summarize the history of {} in a few sentences.",
    "What is a common misconception about {}, and what is the truth?",
    "Write three quiz questions about {}, with answers.",
    "Give me an everyday analogy that explains {}.",
    "What questions should I ask an expert on {}?",
    "Write a short dialogue between a teacher and a student about {}.",
    "What would the world be like without {}?",
    "Describe {} in exactly three sentences.",
    "What are the main arguments for and against paying more attention to {}?",
    "Suggest a fun weekend project about {} for a family.",
    "Write the opening paragraph of a magazine article about {}.",
    "How do scientists or historians learn about {}?",
];

/// Things people learn to do.
const SKILLS: &[&str] = &[
    "baking bread",
    "learning to swim",
    "public speaking",
    "learning a new language",
    "running a first 5K",
    "growing tomatoes",
    "saving money each month",
    "cooking rice",
    "writing a cover letter",
    "planning a trip abroad",
    "learning to draw",
    "touch typing",
    "taking better photos with a phone",
    "keeping a journal",
    "starting to meditate",
    "making new friends as an adult",
    "managing time at work",
    "studying for exams",
    "negotiating a salary",
    "training a puppy",
    "learning chess",
    "playing the ukulele",
    "fixing a flat bike tire",
    "painting a room",
    "making homemade pasta",
    "brewing coffee",
    "writing a short story",
    "organizing a small kitchen",
    "hosting a dinner party",
    "learning to code",
    "giving feedback to a colleague",
    "preparing for a job interview",
    "camping for the first time",
    "reducing screen time",
    "doing a budget",
    "knitting a scarf",
];

const SKILL_TASKS: &[&str] = &[
    "Give me step-by-step instructions for {}.",
    "What mistakes do beginners make when {}?",
    "Make a one-week plan to get started with {}.",
    "What do I need to get started with {}?",
    "How can I stay motivated while {}?",
    "Explain the most important tip for {} and why it works.",
];

const LANGUAGES: &[&str] = &[
    "Python",
    "JavaScript",
    "TypeScript",
    "Rust",
    "Go",
    "Java",
    "C",
    "C++",
    "Ruby",
    "Bash",
];

const CODE_TASKS: &[&str] = &[
    "reverses a string",
    "counts the vowels in a word",
    "checks whether a number is prime",
    "returns the largest number in a list",
    "removes duplicates from a list",
    "computes the factorial of n",
    "returns the n-th Fibonacci number",
    "checks whether a word is a palindrome",
    "sorts a list of names alphabetically",
    "counts how often each word appears in a text",
    "converts Celsius to Fahrenheit",
    "merges two sorted lists",
    "finds the average of a list of numbers",
    "reads a file and prints its number of lines",
    "capitalizes the first letter of every word",
    "checks whether two words are anagrams",
];

const CODE_CONCEPTS: &[&str] = &[
    "variables",
    "loops",
    "recursion",
    "closures",
    "error handling",
    "classes",
    "interfaces",
    "generics",
    "iterators",
    "hash maps",
    "pattern matching",
    "unit tests",
    "modules",
    "string formatting",
    "immutability",
    "concurrency",
];

/// Sentences to rewrite.
const SENTENCES: &[&str] = &[
    "The meeting has been moved to Thursday because the manager is travelling.",
    "We regret to inform you that your order will arrive two days late.",
    "The children built a huge sandcastle on the beach yesterday.",
    "Our team finished the project ahead of schedule and under budget.",
    "The library will be closed on Monday for cleaning.",
    "I can't come to the party tonight because I have too much work.",
    "The new phone has a bigger screen and a longer battery life.",
    "Please remember to turn off the lights when you leave the office.",
    "The scientists discovered a new species of frog in the rainforest.",
    "The train was delayed by forty minutes due to a signal failure.",
    "Thank you for your help with the move last weekend.",
    "The restaurant on the corner serves the best soup in town.",
    "Students must submit their essays before the end of the month.",
    "The museum offers free entry to students every Wednesday afternoon.",
    "After the storm, the whole village worked together to clear the roads.",
    "My neighbour's dog barks every time the postman arrives.",
];

const REWRITE_TASKS: &[&str] = &[
    "Rewrite this sentence to sound more formal: {}",
    "Rewrite this sentence for a young child: {}",
    "Shorten this sentence as much as possible without losing meaning: {}",
    "Paraphrase this sentence: {}",
    "Translate into French: {}",
    "Translate into Spanish: {}",
    "Translate into German: {}",
    "Turn this sentence into a question: {}",
];

const NAMES: &[&str] = &[
    "Maria", "Tom", "Aisha", "Kenji", "Lucas", "Priya", "Omar", "Elena",
];

/// Word problems: `{n}` is a name, `{a}`, `{b}` numbers.
const PROBLEMS: &[&str] = &[
    "{n} reads {a} pages a day. How many pages will {n} read in {b} weeks?",
    "A rectangle is {a} meters long and {b} meters wide. What are its area and perimeter?",
    "{n} buys {a} apples at {b} cents each. How much does {n} pay?",
    "A train travels at {a} km per hour for {b} hours. How far does it go?",
    "{n} has {a} marbles and gives away {b}. How many are left?",
    "What is {a} multiplied by {b}? Show your steps.",
    "A class of {a} students is split into groups of {b}. How many full groups are there, and how many students are left over?",
    "{n} saves {a} dollars a week. How much has {n} saved after {b} weeks?",
];

/// Openers that vary how a request starts, as people write them.
const OPENERS: &[&str] = &[
    "",
    "Hi! ",
    "Quick question: ",
    "Out of curiosity, ",
    "Hello! ",
    "Could you help? ",
];

/// A prompt before its opener: a family of requests and its indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Topic(usize, usize),
    Skill(usize, usize),
    Code(usize, usize),
    Concept(usize, usize),
    Rewrite(usize, usize),
    Problem(usize, usize),
}

/// Word problems per template (distinct number pairs).
const PROBLEM_VARIANTS: usize = 40;

fn bases() -> Vec<Base> {
    let pairs = |n: usize, m: usize| (0..n).flat_map(move |i| (0..m).map(move |j| (i, j)));
    let mut all: Vec<Base> = Vec::new();
    all.extend(pairs(TOPIC_TASKS.len(), TOPICS.len()).map(|(i, j)| Base::Topic(i, j)));
    all.extend(pairs(SKILL_TASKS.len(), SKILLS.len()).map(|(i, j)| Base::Skill(i, j)));
    all.extend(pairs(CODE_TASKS.len(), LANGUAGES.len()).map(|(i, j)| Base::Code(i, j)));
    all.extend(pairs(CODE_CONCEPTS.len(), LANGUAGES.len()).map(|(i, j)| Base::Concept(i, j)));
    all.extend(pairs(REWRITE_TASKS.len(), SENTENCES.len()).map(|(i, j)| Base::Rewrite(i, j)));
    all.extend(pairs(PROBLEMS.len(), PROBLEM_VARIANTS).map(|(i, j)| Base::Problem(i, j)));
    all
}

fn text(base: Base) -> String {
    match base {
        Base::Topic(t, i) => TOPIC_TASKS[t].replace("{}", TOPICS[i]),
        Base::Skill(t, i) => SKILL_TASKS[t].replace("{}", SKILLS[i]),
        Base::Code(t, l) => format!("Write a {} function that {}.", LANGUAGES[l], CODE_TASKS[t]),
        Base::Concept(c, l) => format!(
            "Explain {} in {} with a short example.",
            CODE_CONCEPTS[c], LANGUAGES[l]
        ),
        Base::Rewrite(t, s) => REWRITE_TASKS[t].replace("{}", SENTENCES[s]),
        Base::Problem(t, v) => {
            // Distinct, small numbers for each variant.
            let a = 3 + (v * 7) % 37;
            let b = 2 + (v * 5 + t) % 11;
            PROBLEMS[t]
                .replace("{n}", NAMES[(v + t) % NAMES.len()])
                .replace("{a}", &a.to_string())
                .replace("{b}", &b.to_string())
        }
    }
}

/// First words that a request goes on with in lower case after an opener ending in a comma
/// (names and languages keep their capital).
const LOWERED_STARTS: &[&str] = &[
    "Explain",
    "What",
    "List",
    "Write",
    "Tell",
    "Summarize",
    "Give",
    "Describe",
    "How",
    "Suggest",
    "Make",
    "Rewrite",
    "Shorten",
    "Paraphrase",
    "Translate",
    "Turn",
    "A",
];

/// With an opener; after one that ends in a comma a request starting with a common word goes
/// on in lower case.
fn with_opener(opener: &str, request: &str) -> String {
    let first_word = request.split(' ').next().unwrap_or("");
    if opener.ends_with(", ") && LOWERED_STARTS.contains(&first_word) {
        let mut chars = request.chars();
        let first = chars.next().map(|c| c.to_lowercase().to_string());
        format!("{opener}{}{}", first.unwrap_or_default(), chars.as_str())
    } else {
        format!("{opener}{request}")
    }
}

/// How many distinct prompts the templates can make.
pub fn template_capacity() -> usize {
    bases().len() * OPENERS.len()
}

/// `count` distinct prompts (at most [`template_capacity`]), the same for the same seed: the
/// requests in a seeded order, each with an opener, every request once before any repeats with
/// another opener.
pub fn template_prompts(count: usize, seed: u64) -> Vec<String> {
    let mut bases = bases();
    let mut shuffler = Shuffler::new(seed);
    shuffler.shuffle(&mut bases);
    let mut prompts = Vec::with_capacity(count.min(template_capacity()));
    for round in 0..OPENERS.len() {
        for (i, base) in bases.iter().enumerate() {
            if prompts.len() == count {
                return prompts;
            }
            // Each request gets a different opener in each round.
            let opener = OPENERS[(i + round) % OPENERS.len()];
            prompts.push(with_opener(opener, &text(*base)));
        }
    }
    prompts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn prompts_are_distinct_complete_and_fixed_by_the_seed() {
        let capacity = template_capacity();
        assert_eq!(capacity, bases().len() * 6);
        let all = template_prompts(capacity + 10, 7);
        assert_eq!(all.len(), capacity);
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), capacity);
        assert!(all.iter().all(|p| !p.contains('{') && !p.contains('}')));
        assert_eq!(template_prompts(50, 7), all[..50]);
        assert_ne!(template_prompts(50, 8), all[..50]);
    }

    #[test]
    fn requests_read_as_written() {
        assert_eq!(
            text(Base::Code(0, 0)),
            "Write a Python function that reverses a string."
        );
        assert_eq!(
            text(Base::Topic(0, 0)),
            "Explain black holes to a ten-year-old."
        );
        assert_eq!(
            text(Base::Problem(0, 1)),
            "Tom reads 10 pages a day. How many pages will Tom read in 7 weeks?"
        );
        assert_eq!(
            with_opener(
                "Out of curiosity, ",
                "Explain loops in Go with a short example."
            ),
            "Out of curiosity, explain loops in Go with a short example."
        );
        assert_eq!(with_opener("Hi! ", "What is DNA?"), "Hi! What is DNA?");
        assert_eq!(
            with_opener("Out of curiosity, ", "Kenji has 3 marbles."),
            "Out of curiosity, Kenji has 3 marbles."
        );
    }
}
