"""Long multi-session conversations with questions annotated with their answering turns.

Generated reproducibly for this repository (no outside data; the generator is the
source, public domain like the rest of the repository's bench data). Each
conversation is two people chatting over ~20 sessions spread across ten months,
~300+ turns: small talk and reactions around ~12 life events per speaker (a new
pet, a move, a job, a trip, a medication, a birthday, ...). The event turn is
where the fact is said; reactions and follow-ups around it repeat its words (as
people do) without being the annotated answer. Small talk repeats across sessions
("Can't wait!", "Haha, so true."), so exact repeats occur, and both speakers say
the same things, so "A: Can't wait!" and "B: Can't wait!" are distinct turns.

Questions, each with the ids of the turns that answer it. About half reuse words
of the answering turn, as people who write questions while reading a
conversation do ("What did Mel name the beagle puppy?"); the others are
paraphrased ("What is the name of Mel's dog?"). (The first version had only
paraphrased questions, which the lexical leg cannot answer; BENCHMARKS.md gives
both results.)

- single-hop: one fact, asked in other words ("What did Mel name the puppy?");
- multi-hop: two facts of one person joined ("What is the dog called that was
  adopted by the person who moved to Lisbon?");
- temporal: when something happened ("When did Mel adopt the puppy?"), answered by
  the event turn (its session date is the memory's date);
- keyword: a rare name or number from the fact ("Who is Biscuit?").

This is not LoCoMo and was not derived from it; it has the same shape (long
multi-session dialogues, evidence turns per question) so that the memory search
can be measured on it. Being generated, its wording is narrower than people's:
read its numbers as a regression check of retrieval, not as absolute quality.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

PEOPLE = [
    ("Caroline", "Melanie"), ("Jon", "Gina"), ("Priya", "Tomas"), ("Aiko", "Deborah"),
    ("Marcus", "Lena"), ("Sofia", "Evan"),
]
PETS = ["Biscuit", "Pepper", "Mochi", "Rufus", "Luna", "Nabi", "Ziggy", "Olive", "Waffles", "Juniper", "Pickles", "Bruno"]
BREEDS = ["beagle", "corgi", "labrador", "dachshund", "border-collie", "shiba", "poodle", "greyhound"]
CITIES = ["Denver", "Lisbon", "Austin", "Portland", "Toronto", "Busan", "Prague", "Osaka", "Boston", "Tucson", "Oslo", "Leeds"]
JOBS = [("nurse", "St. Anne's Hospital"), ("data analyst", "Brightline"), ("teacher", "Maple Grove Elementary"),
        ("barista", "Copper Kettle"), ("architect", "Fold Studio"), ("paramedic", "the county EMS"),
        ("product designer", "Nimbus"), ("electrician", "Volt Brothers")]
HOBBIES = ["pottery", "salsa-dancing", "rock-climbing", "watercolor", "painting", "woodworking", "fencing", "improv", "ceramics"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
RELATIONS = ["sister", "brother", "mother", "father", "cousin", "grandmother"]
RNAMES = ["Mina", "Ruth", "Omar", "Felix", "Hana", "Dario", "Inez", "Yusuf", "Clara", "Theo"]
COUNTRIES = [("Japan", "cherry blossoms"), ("Peru", "Machu Picchu"), ("Iceland", "northern lights"),
             ("Morocco", "Marrakesh markets"), ("Vietnam", "Ha Long Bay"), ("Norway", "fjords")]
BOOKS = ["The Overstory", "Piranesi", "Klara and the Sun", "Educated", "The Remains of the Day",
         "Circe", "Station Eleven", "A Gentleman in Moscow"]
DRUGS = ["lisinopril", "metformin", "amlodipine", "sertraline", "levothyroxine", "atorvastatin"]
CARS = [("Civic", "Outback"), ("Corolla", "Model 3"), ("Golf", "RAV4"), ("Focus", "CR-V")]
INSTRUMENTS = ["cello", "ukulele", "piano", "trumpet", "violin", "drums"]
RACES = [("half marathon", "1:58"), ("10K", "52 minutes"), ("marathon", "4:21"), ("5K", "24 minutes")]

# (kind, statements, follow-ups by the speaker, reactions by the partner, questions)
EVENTS = [
    ("pet",
     ["We finally adopted a {breed} puppy last weekend, we named him {pet}!",
      "Guess what, we brought home a little {breed} and called him {pet}."],
     ["He's only ten weeks old and already chews every shoe in the house.",
      "The first night he cried for hours, but now he sleeps in his crate."],
     ["Aww, {pet} is such a cute name! Send pictures!", "A puppy! That's amazing news."],
     [("single-hop", "What is the name of {who}'s dog?"), ("single-hop", "What kind of dog did {who} get?"),
      ("temporal", "When did {who} adopt the puppy?"), ("keyword", "Who is {pet}?"),
      ("single-hop", "What did {who} name the {breed} puppy?"), ("temporal", "When did {who} bring home {pet}?")]),
    ("move",
     ["We moved from {city1} to {city2} last month, still unpacking boxes.",
      "Big news: we left {city1} and we're living in {city2} now."],
     ["The new apartment is smaller but the light is wonderful.",
      "I miss my old neighbours, but the commute is so much shorter."],
     ["Wow, {city2}! How are you settling in?", "Moving is exhausting, hope the boxes are almost gone."],
     [("single-hop", "Where did {who} live before moving?"), ("single-hop", "Which city does {who} live in now?"),
      ("temporal", "When did {who} move house?"),
      ("single-hop", "Which city did {who} move to from {city1}?"), ("temporal", "When did {who} move to {city2}?")]),
    ("job",
     ["I started a new job as a {job} at {company} this week.",
      "I accepted the offer, I'm going to be a {job} at {company}!"],
     ["The team is great, although the first days were overwhelming.",
      "I have to wake up at six now, but I love the work."],
     ["Congrats on the new job! You deserve it.", "That's huge, I'm so proud of you!"],
     [("single-hop", "What is {who}'s profession now?"), ("single-hop", "Where does {who} work?"),
      ("temporal", "When did {who} start the new position?"),
      ("single-hop", "Where did {who} start a new job as a {job}?"), ("temporal", "When did {who} start working at {company}?")]),
    ("hobby",
     ["I signed up for a {hobby} class on {weekday} evenings.",
      "I've started taking {hobby} lessons every {weekday} after work."],
     ["My first attempt was a disaster but the teacher was patient.",
      "It's the one evening a week I don't look at my phone."],
     ["That sounds so relaxing, you'll have to show me what you make.", "Good for you, trying something new!"],
     [("single-hop", "What class is {who} taking?"), ("single-hop", "What does {who} do on {weekday} evenings?"),
      ("single-hop", "What lessons did {who} sign up for?")]),
    ("birthday",
     ["My {relation} {rname}'s birthday is on {month} {day}, I'm planning a surprise party.",
      "{rname}, my {relation}, turns thirty on {month} {day} and I'm organising a surprise."],
     ["I already booked the back room of our favourite restaurant.",
      "The hard part is keeping it secret from everyone."],
     ["A surprise party, how fun! Count me in.", "Let me know if you need help with decorations."],
     [("single-hop", "When is the birthday of {who}'s {relation}?"), ("keyword", "Who is {rname}?"),
      ("single-hop", "What is {who} planning for the {relation}?"),
      ("single-hop", "When is {rname}'s birthday?")]),
    ("trip",
     ["We're going to {country} in {month} to see the {sight}.",
      "We just booked flights to {country} for {month}, I can't wait to see the {sight}."],
     ["I've been reading guidebooks every night.", "It's our first big trip since before the kids."],
     ["That's a dream trip! Take lots of photos.", "So jealous, I've always wanted to go there."],
     [("single-hop", "Which country is {who} travelling to?"), ("single-hop", "What does {who} want to see on the trip?"),
      ("temporal", "When did {who} book the trip abroad?"),
      ("single-hop", "When is {who} going to {country}?")]),
    ("book",
     ["I just finished reading {book}, I couldn't put it down.",
      "Stayed up until two finishing {book} last night."],
     ["The ending made me cry on the bus.", "I'm lending it to my mom next."],
     ["I've heard good things about that one!", "Adding it to my list, thanks."],
     [("single-hop", "What novel did {who} recently read?"), ("keyword", "Who read {book}?"),
      ("single-hop", "Which book could {who} not put down?")]),
    ("health",
     ["The doctor put me on {dose}mg of {drug} for my blood pressure.",
      "I'm taking {dose}mg of {drug} every morning now, doctor's orders."],
     ["I have to check my pressure at home twice a week.", "Cutting back on salt is the hardest part."],
     ["Take care of yourself, health comes first.", "Glad you went to the doctor."],
     [("single-hop", "What medication is {who} on?"), ("single-hop", "What dose does {who} take for blood pressure?"),
      ("single-hop", "What did the doctor put {who} on?")]),
    ("car",
     ["I sold my old {car1} and bought a {color} {car2}.",
      "Traded in the {car1} for a {color} {car2} yesterday."],
     ["It has heated seats, which is all I ever wanted.", "Parallel parking it is still scary."],
     ["Ooh, new wheels! Road trip soon?", "Nice, the old one was falling apart anyway."],
     [("single-hop", "What does {who} drive now?"), ("single-hop", "What car did {who} get rid of?"),
      ("single-hop", "What did {who} buy after selling the {car1}?")]),
    ("race",
     ["I ran my first {race} in {city2} and finished in {time}.",
      "Finished the {city2} {race} in {time}, my legs are dead."],
     ["I trained for four months for it.", "The last two kilometres were all uphill."],
     ["That's an incredible time!", "You're a machine, congratulations!"],
     [("single-hop", "How long did {who}'s race take?"), ("single-hop", "What race did {who} run?"),
      ("temporal", "When did {who} run the race?"),
      ("single-hop", "What was {who}'s finishing time in {city2}?")]),
    ("instrument",
     ["I've been learning the {instrument} for three months now.",
      "I bought a second-hand {instrument} and I practise every night."],
     ["My neighbours are very patient with me.", "I can finally play a full song."],
     ["You'll have to play something for me!", "Music is such a good outlet."],
     [("single-hop", "What instrument does {who} play?"),
      ("single-hop", "How long has {who} been learning the {instrument}?")]),
]
MULTI_HOP = [
    ("move", "pet", "What is the dog called that was adopted by the person who moved to {city2}?"),
    ("job", "car", "What car does the {job} drive?"),
    ("move", "race", "In which city did {who} run a race after leaving {city1}?"),
    ("trip", "job", "Where does the person who is travelling to {country} work?"),
    ("pet", "hobby", "What evening class does {pet}'s owner take?"),
]
SMALL_TALK = [
    "Hey! How was your week?", "Hi! Long time no talk.", "How are you doing?", "What have you been up to?",
    "Haha, so true.", "Can't wait!", "Can't wait too!", "That sounds great!", "Thanks!", "Same here.",
    "I know, right?", "Oh no, that's rough.", "Ugh, Mondays.", "Totally agree with you.",
    "I'm so tired this week, work has been crazy.", "The weather has been awful lately.",
    "Did you watch the game last night?", "I made lasagna yesterday, it was delicious.",
    "Talk soon!", "Gotta run, bye!", "Have a great weekend!", "Miss you!", "Lol, classic.",
    "We should grab coffee sometime.", "How's your family?", "Everyone's good, thanks for asking.",
    "I've been binge-watching a cooking show.", "My phone screen cracked again.",
    "Any plans for the weekend?", "Not much, just relaxing at home.", "That's wonderful news!",
    "I'm proud of you.", "What do you mean?", "Really? Tell me more!", "Good night!",
]


@dataclass
class Turn:
    """One turn: `id` is unique in the data set; `session` indexes Conversation.dates."""

    id: str
    speaker: str
    text: str
    session: int

    @property
    def stored(self) -> str:
        """The text saved as a memory: who said it, and what."""
        return f"{self.speaker}: {self.text}"


@dataclass
class Question:
    """A question with the ids of the turns that answer it."""

    text: str
    kind: str
    evidence: list[str]


@dataclass
class Conversation:
    """Two speakers' sessions (turns in order, one date per session) and the questions."""

    speakers: tuple[str, str]
    dates: list[datetime]
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    facts: list[tuple[Turn, str, dict]] = field(default_factory=list)  # (turn, template, slots)


def _slots(rng: random.Random) -> dict[str, str]:
    city1, city2 = rng.sample(CITIES, 2)
    job, company = rng.choice(JOBS)
    country, sight = rng.choice(COUNTRIES)
    car1, car2 = rng.choice(CARS)
    race, time = rng.choice(RACES)
    return {
        "pet": rng.choice(PETS), "breed": rng.choice(BREEDS), "city1": city1, "city2": city2,
        "job": job, "company": company, "hobby": rng.choice(HOBBIES).replace("-", " "),
        "weekday": rng.choice(WEEKDAYS), "relation": rng.choice(RELATIONS), "rname": rng.choice(RNAMES),
        "month": rng.choice(MONTHS), "day": str(rng.randint(1, 28)), "country": country, "sight": sight,
        "book": rng.choice(BOOKS), "dose": str(rng.choice([5, 10, 20, 40])), "drug": rng.choice(DRUGS),
        "car1": car1, "car2": car2, "color": rng.choice(["red", "grey", "blue", "white"]),
        "race": race, "time": time, "instrument": rng.choice(INSTRUMENTS),
    }


def _small_talk(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(SMALL_TALK) for _ in range(n)]


def conversation(index: int, sessions: int = 20, seed: int = 15) -> Conversation:
    """Conversation `index` (deterministic for a given seed)."""
    rng = random.Random(seed * 1000 + index)
    speakers = PEOPLE[index % len(PEOPLE)]
    start = datetime(2025, 1, 6, 19, tzinfo=UTC) + timedelta(days=9 * index)
    dates = [start + timedelta(days=15 * s + rng.randint(0, 5)) for s in range(sessions)]
    conv = Conversation(speakers, dates)
    slots = {who: {**_slots(rng), "who": who} for who in speakers}
    plan = [(who, event) for who in speakers for event in EVENTS]
    rng.shuffle(plan)
    said: dict[tuple[str, str], Turn] = {}
    for s in range(sessions):
        for i, (who, event) in enumerate(plan):
            if i * sessions // len(plan) == s:
                _session_event(conv, rng, s, who, event, slots[who], said)
        _chat(conv, rng, s, rng.randint(6, 10))
    _add_multi_hop(conv, slots, said)
    return conv


def _add(conv: Conversation, speaker: str, text: str, session: int) -> Turn:
    turn = Turn(f"{conv.speakers[0][:2]}{len(conv.turns):04d}", speaker, text, session)
    conv.turns.append(turn)
    return turn


def _chat(conv: Conversation, rng: random.Random, session: int, n: int) -> None:
    for i, text in enumerate(_small_talk(rng, n)):
        _add(conv, conv.speakers[i % 2], text, session)


def _session_event(conv, rng, session, who, event, slots, said) -> None:
    kind, statements, follow_ups, reactions, questions = event
    other = conv.speakers[1] if who == conv.speakers[0] else conv.speakers[0]
    _chat(conv, rng, session, rng.randint(1, 3))
    template = rng.choice(statements)
    fact = _add(conv, who, template.format(**slots), session)
    conv.facts.append((fact, template, slots))
    _add(conv, other, rng.choice(reactions).format(**slots), session)
    _add(conv, who, rng.choice(follow_ups).format(**slots), session)
    said[(who, kind)] = fact
    for qkind, template in questions:
        conv.questions.append(Question(template.format(**slots), qkind, [fact.id]))


def _add_multi_hop(conv: Conversation, slots: dict, said: dict) -> None:
    for who in conv.speakers:
        for first, second, template in MULTI_HOP:
            evidence = [said[(who, first)].id, said[(who, second)].id]
            conv.questions.append(Question(template.format(**slots[who]), "multi-hop", evidence))


ALTERNATIVES = {  # values a correction may put in place of a slot's
    "pet": PETS, "breed": BREEDS, "city1": CITIES, "city2": CITIES, "job": [j for j, _ in JOBS],
    "company": [c for _, c in JOBS], "hobby": [h.replace("-", " ") for h in HOBBIES],
    "weekday": WEEKDAYS, "relation": RELATIONS, "rname": RNAMES, "month": MONTHS,
    "day": [str(d) for d in range(1, 29)], "country": [c for c, _ in COUNTRIES],
    "sight": [s for _, s in COUNTRIES], "book": BOOKS, "dose": ["5", "10", "20", "40"],
    "drug": DRUGS, "car1": [a for a, _ in CARS], "car2": [b for _, b in CARS],
    "color": ["red", "grey", "blue", "white"], "race": [r for r, _ in RACES],
    "time": [t for _, t in RACES], "instrument": INSTRUMENTS,
}


def corrections(conv: Conversation, seed: int = 7) -> list[tuple[str, str, str]]:
    """Two corrections of every fact said in `conv`, as (fact turn id, kind, stored text):
    "restated", the same sentence with one value changed ("...named him Pepper!" for
    "...named him Biscuit!"), and "reworded", the event's other sentence with that value
    changed (a correction seldom repeats the first wording)."""
    import string

    rng = random.Random(seed)
    out = []
    for turn, template, slots in conv.facts:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f and f != "who"]
        name = rng.choice(names)
        value = rng.choice([v for v in ALTERNATIVES[name] if v not in slots.values()])
        changed = {**slots, name: value}
        other = next(
            (s for _, st, *_ in EVENTS for s in st if template in st and s != template
             and name in s), template,
        )
        for kind, text in (("restated", template), ("reworded", other)):
            out.append((turn.id, kind, f"{turn.speaker}: {text.format(**changed)}"))
    return out


def dataset(conversations: int = 6, sessions: int = 20, seed: int = 15) -> list[Conversation]:
    """The benchmark's conversations (deterministic)."""
    return [conversation(i, sessions, seed) for i in range(conversations)]


if __name__ == "__main__":
    data = dataset()
    for conv in data:
        kinds: dict[str, int] = {}
        for q in conv.questions:
            kinds[q.kind] = kinds.get(q.kind, 0) + 1
        print(conv.speakers, len(conv.turns), "turns", len(conv.questions), "questions", kinds)
    for turn in data[0].turns[:30]:
        print(turn.session, turn.stored)
    for q in data[0].questions[:8]:
        print(q.kind, q.text, q.evidence)
