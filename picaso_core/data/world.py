"""A seeded world of fictional entities whose facts are spread over several short passages.

Why it looks like this: a tiny model trained on it should only lower its continuation loss by
copying from retrieved chunks. So every fact value is unpredictable without context (random
syllable names, numbers, colour + product pairs) and is written verbatim in exactly one chunk of
its entity; continuations restate those values in templated sentences.

Names are built from syllables so a tokenizer trained on training text covers held-out names
too; which exact names are held out is fixed by a hash of the name (`name_split`), so training
worlds generated from any seed never contain a test-split name, and vice versa.

Glossary:
  entity  one subject (city, person, company, river, mountain) with an intro and 7 facts
  intro   what the query half states (type + region): never a key value
  fact    attribute -> value; each value is written in one chunk and restated in continuations
  chunk   a database passage of 2-3 facts of one entity plus filler sentences (~40-120 tokens)
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------
# Names

_SYLLABLES = (
    "vel mor tar rix os dal len quel bran dor kel mi ra sen thal ur zan fen gor li ma nor pel "
    "qua ril sa tor va wen yl ash bel cor dra el fal hin ist jor kar lun mar nev or pra sel tam "
    "vin zor bri cal den ev gal ho ka lo ne pi ru si te"
).split()
HELDOUT_EVERY = 8  # one name in 8 (by hash) belongs to the held-out split


def name_split(name: str) -> str:
    """'test' or 'train' for a single name, by a stable hash (same on every machine/run)."""
    return "test" if zlib.crc32(name.lower().encode()) % HELDOUT_EVERY == 0 else "train"


def make_name(rng: random.Random, split: str, min_syl: int = 2, max_syl: int = 3) -> str:
    """A capitalised syllable name that belongs to `split` ('train' or 'test')."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    while True:
        n = rng.randint(min_syl, max_syl)
        name = "".join(rng.choice(_SYLLABLES) for _ in range(n)).capitalize()
        if name_split(name) == split:
            return name


def mentions(text: str, value: str) -> bool:
    """Whether `value` occurs in `text` as whole words ('1423' is not in '914236')."""
    return re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", text) is not None


# --------------------------------------------------------------------------------------------
# Values: each kind draws from a large space so a model cannot guess it without the context.

COLOURS = (
    "red blue green yellow black white silver golden grey purple orange amber violet crimson "
    "scarlet ivory copper bronze pale dark"
).split()
PRODUCTS = (
    "glass silk wool salt copper tea wine paper cloth rope lamps bells clocks boats carpets "
    "pottery soap candles spices honey cheese timber marble tin iron ink dye linen leather"
).split()
ANIMALS = "goats deer foxes hawks wolves owls hares bears lynxes eagles ravens ibex".split()
FISH = "trout salmon carp perch pike eels bream sturgeon catfish char".split()
MONTHS = "January February March April May June July August September October November December".split()
ADJECTIVES = (
    "Silent Hidden Broken Burning Golden Distant Hollow Endless Frozen Crimson Quiet Lost Iron "
    "Silver Wandering Final Northern Sleeping Bright Open"
).split()
NOUNS = (
    "Lantern Harbour Garden Mirror Tower River Crown Letter Winter Bridge Orchard Voyage Forest "
    "Compass Threshold Window Shore Engine Feather Valley"
).split()
PROFESSIONS = (
    "painter poet sculptor composer mapmaker astronomer physician architect weaver historian "
    "engineer botanist"
).split()
INDUSTRIES = "shipping mining textile printing brewing farming clockmaking glassmaking".split()
COMPANY_SUFFIXES = "Works Trading Industries Foundry Holdings Mills Company Guild".split()
DIRECTIONS = "northern southern eastern western central coastal".split()


def draw_value(kind: str, rng: random.Random, split: str) -> str:
    """One random value of `kind`; names in it belong to `split`."""
    name = lambda: make_name(rng, split)  # noqa: E731 - tiny local shorthand
    if kind == "year":
        return str(rng.randint(1050, 1950))
    if kind == "count":
        return str(rng.randint(1200, 950000))
    if kind == "small":
        return str(rng.randint(3, 90))
    if kind == "km":
        return str(rng.randint(40, 3200))
    if kind == "metres":
        return str(rng.randint(900, 8800))
    if kind == "person":
        return f"{name()} {make_name(rng, split, 2, 2)}"
    if kind == "place":
        return name()
    if kind == "good":
        return f"{rng.choice(COLOURS)} {rng.choice(PRODUCTS)}"
    if kind == "animal":
        return f"{rng.choice(COLOURS)} {rng.choice(ANIMALS)}"
    if kind == "fish":
        return f"{rng.choice(COLOURS)} {rng.choice(FISH)}"
    if kind == "title":
        return f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    if kind == "festival":
        return f"the {name()} Festival"
    if kind == "month":
        return rng.choice(MONTHS)
    if kind == "company":
        return f"{name()} {rng.choice(COMPANY_SUFFIXES)}"
    if kind == "mountain":
        return f"Mount {name()}"
    if kind == "lake":
        return f"Lake {name()}"
    if kind == "sea":
        return f"the {name()} Sea"
    if kind == "range":
        return f"the {name()} Range"
    raise ValueError(f"unknown value kind {kind!r}")


# --------------------------------------------------------------------------------------------
# Entity types: templates use {e} (entity name) and {v} (value).


@dataclass(frozen=True)
class Attribute:
    name: str
    kind: str  # value kind for draw_value
    chunk: tuple[str, ...]  # >= 3 phrasings used in database chunks
    restate: tuple[str, ...]  # other phrasings, for the paraphrase variant of samples (demo_world)
    question: str  # MS MARCO-style question


@dataclass(frozen=True)
class EntityType:
    name: str
    intro: tuple[str, ...]  # query-half phrasings; use {e}, {region}, {dir}, {role}
    roles: tuple[str, ...]  # fills {role} in the intro (profession, industry...)
    fillers: tuple[str, ...]  # value-free sentences that pad chunks and queries
    attributes: tuple[Attribute, ...]
    name_kind: str = "place"  # draw_value kind of the entity's own name
    name_format: str = "{n}"  # how a drawn name becomes the entity name


A = Attribute
CITY = EntityType(
    name="city",
    intro=(
        "{e} is a city in the {dir} province of {region}.",
        "The city of {e} lies in {region}, a {dir} province.",
        "{e} is one of the older cities of the {dir} province of {region}.",
    ),
    roles=("city",),
    fillers=(
        "Its old quarter is known for narrow streets and stone walls.",
        "Travellers often describe {e} as quiet in winter and crowded in summer.",
        "The markets of {e} open early in the morning.",
        "Many stories are told about the early days of {e}.",
        "The history of {e} is long and often surprising.",
    ),
    attributes=(
        A("founded", "year", ("Records show that {e} was founded in {v}.", "{e} dates back to the year {v}, when it was founded.", "The founding of {e} took place in {v}."), ("{e} was founded in {v}.",), "When was {e} founded?"),
        A("founder", "person", ("The city was first settled by the merchant {v}.", "Local accounts credit {v} with founding {e}.", "{e} was established by a trader named {v}."), ("Its founder was {v}.", "{e} was founded by {v}."), "Who founded {e}?"),
        A("export", "good", ("The main export of {e} is {v}.", "Most of the trade of {e} is in {v}.", "{e} is famous for the {v} it sends abroad."), ("Its main export is {v}.", "{e} exports {v}."), "What is the main export of {e}?"),
        A("river", "place", ("The river {v} runs through the centre of {e}.", "{e} was built on the banks of the river {v}.", "A river called the {v} crosses {e}."), ("Its river is the {v}.", "The river {v} flows through {e}."), "Which river flows through {e}?"),
        A("population", "count", ("At the last count, {e} had {v} inhabitants.", "About {v} people live in {e}.", "The population of {e} is {v}."), ("{e} has {v} inhabitants.", "Its population is {v}."), "How many people live in {e}?"),
        A("mayor", "person", ("The current mayor of {e} is {v}.", "{e} is governed by the mayor {v}.", "Since the last election, {v} has been mayor of {e}."), ("Its mayor is {v}.", "{e} is led by the mayor {v}."), "Who is the mayor of {e}?"),
        A("festival", "festival", ("Every summer {e} holds {v}.", "The best known celebration in {e} is {v}.", "Crowds come to {e} each year for {v}."), ("{e} is known for {v}.", "Its festival is {v}."), "Which festival is held in {e}?"),
    ),
)
PERSON = EntityType(
    name="person",
    intro=(
        "{e} was a {role} from the {region} region.",
        "{e} was a {role} who spent most of a long life in {region}.",
        "Born in the {dir} region of {region}, {e} worked as a {role}.",
    ),
    roles=PROFESSIONS,
    name_kind="person",
    fillers=(
        "{e} was said to work late into the night.",
        "Friends remembered {e} as patient and curious.",
        "Little is known about the childhood of {e}.",
        "Letters written by {e} are still read today.",
        "The work of {e} was admired by many students.",
    ),
    attributes=(
        A("born", "year", ("{e} was born in the year {v}.", "The birth of {e} is recorded in {v}.", "Parish books give {v} as the year {e} was born."), ("{e} was born in {v}.",), "When was {e} born?"),
        A("teacher", "person", ("As a young student, {e} learned the craft from {v}.", "{e} trained under the master {v}.", "The teacher of {e} was {v}."), ("{e} studied under {v}.", "Their teacher was {v}."), "Who taught {e}?"),
        A("work", "title", ("The best known work of {e} is called {v}.", "{e} is remembered above all for {v}.", "Critics still praise {v}, the masterpiece of {e}."), ("{e} is known for {v}.", "Their best known work is {v}."), "What is the best known work of {e}?"),
        A("spouse", "person", ("{e} married {v} late in life.", "The spouse of {e} was {v}.", "{e} shared a house with {v}, whom they had married young."), ("{e} was married to {v}.",), "Who was {e} married to?"),
        A("city", "place", ("For many years {e} lived in the city of {v}.", "{e} moved to {v} and stayed there.", "The city of {v} was home to {e}."), ("{e} lived in {v}.",), "Where did {e} live?"),
        A("works", "small", ("In total {e} completed {v} works.", "Scholars count {v} finished works by {e}.", "{e} left behind {v} works."), ("{e} completed {v} works.",), "How many works did {e} complete?"),
        A("colour", "good", ("{e} always kept {v} in the workshop.", "Visitors noticed that {e} collected {v}.", "A famous portrait shows {e} holding {v}."), ("{e} collected {v}.",), "What did {e} collect?"),
    ),
)
COMPANY = EntityType(
    name="company",
    intro=(
        "{e} is a {role} company based in the {region} region.",
        "{e} is a {role} firm with offices across {region}.",
        "Among the {role} businesses of {region}, {e} is one of the largest.",
    ),
    roles=INDUSTRIES,
    name_kind="company",
    fillers=(
        "The company has grown steadily over the years.",
        "{e} is often discussed in trade journals.",
        "Workers at {e} describe it as a demanding employer.",
        "The offices of {e} are open six days a week.",
        "Few companies in the region are as old as {e}.",
    ),
    attributes=(
        A("founded", "year", ("{e} was founded in {v}.", "The company {e} opened its doors in {v}.", "{e} began trading in the year {v}."), ("{e} was founded in {v}.",), "When was {e} founded?"),
        A("founder", "person", ("The company was started by {v}.", "{v} founded {e} with a small loan.", "{e} owes its existence to its founder {v}."), ("It was founded by {v}.", "{e} was started by {v}."), "Who founded {e}?"),
        A("hq", "place", ("The headquarters of {e} are in {v}.", "{e} is run from offices in {v}.", "From its base in {v}, {e} manages its trade."), ("Its headquarters are in {v}.", "{e} is based in {v}."), "Where are the headquarters of {e}?"),
        A("product", "good", ("{e} is best known for its {v}.", "The main product of {e} is {v}.", "Most of the income of {e} comes from {v}."), ("Its main product is {v}.", "{e} makes {v}."), "What is the main product of {e}?"),
        A("chief", "person", ("The company is led today by {v}.", "{v} serves as the chief of {e}.", "{e} appointed {v} as its head."), ("It is led by {v}.", "The head of {e} is {v}."), "Who leads {e}?"),
        A("staff", "count", ("{e} employs {v} people.", "The payroll of {e} lists {v} workers.", "Some {v} people work for {e}."), ("{e} employs {v} people.",), "How many people work for {e}?"),
        A("rival", "company", ("The great rival of {e} is {v}.", "{e} competes mostly with {v}.", "For decades {e} and {v} have fought over customers."), ("Its rival is {v}.", "{e} competes with {v}."), "Who is the rival of {e}?"),
    ),
)
RIVER = EntityType(
    name="river",
    intro=(
        "The {e} is a river in the {dir} lands of {region}.",
        "The {e} flows through the {region} region.",
        "The {e} is the longest river of the {dir} region of {region}.",
    ),
    roles=("river",),
    fillers=(
        "The water is cold even in summer.",
        "Boats travel slowly along the {e}.",
        "Fishermen have worked the {e} for centuries.",
        "In spring the {e} often floods its banks.",
        "Many songs are written about the {e}.",
    ),
    name_format="{n} River",
    attributes=(
        A("length", "km", ("The {e} is {v} kilometres long.", "From source to mouth the {e} runs for {v} kilometres.", "Maps give the length of the {e} as {v} kilometres."), ("The {e} is {v} kilometres long.",), "How long is the {e}?"),
        A("source", "mountain", ("The {e} rises on the slopes of {v}.", "The source of the {e} is on {v}.", "Springs on {v} feed the {e}."), ("It rises on {v}.", "The {e} starts on {v}."), "Where does the {e} rise?"),
        A("mouth", "sea", ("The {e} ends in {v}.", "At its mouth the {e} empties into {v}.", "The waters of the {e} reach {v}."), ("It flows into {v}.", "The {e} ends in {v}."), "Where does the {e} end?"),
        A("town", "place", ("The largest town on the {e} is {v}.", "The {e} passes through the town of {v}.", "The town of {v} grew up beside the {e}."), ("It passes through {v}.", "The {e} flows past {v}."), "Which town lies on the {e}?"),
        A("fish", "fish", ("The {e} is full of {v}.", "Anglers on the {e} mostly catch {v}.", "The most common fish in the {e} are {v}."), ("The {e} is full of {v}.", "Its fish are {v}."), "What fish live in the {e}?"),
        A("bridges", "small", ("There are {v} bridges across the {e}.", "The {e} is crossed by {v} bridges.", "Travellers can cross the {e} on {v} bridges."), ("The {e} has {v} bridges.",), "How many bridges cross the {e}?"),
        A("explorer", "person", ("The {e} was first mapped by {v}.", "The explorer {v} charted the {e}.", "The first map of the {e} was drawn by {v}."), ("It was mapped by {v}.", "The {e} was first mapped by {v}."), "Who first mapped the {e}?"),
    ),
)
MOUNTAIN = EntityType(
    name="mountain",
    intro=(
        "{e} is a mountain in the {dir} part of {region}.",
        "{e} stands above the valleys of {region}.",
        "{e} is the highest peak in the {dir} region of {region}.",
    ),
    roles=("mountain",),
    fillers=(
        "Snow covers the summit for most of the year.",
        "The weather on {e} changes quickly.",
        "Shepherds graze their flocks on the lower slopes of {e}.",
        "Climbers say the last ridge of {e} is the hardest.",
        "On clear days {e} can be seen from far away.",
    ),
    name_format="Mount {n}",
    attributes=(
        A("height", "metres", ("{e} is {v} metres high.", "The summit of {e} reaches {v} metres.", "Surveyors measured {e} at {v} metres."), ("{e} is {v} metres high.",), "How high is {e}?"),
        A("climber", "person", ("The first person to climb {e} was {v}.", "{v} was the first to reach the top of {e}.", "{e} was first climbed by {v}."), ("It was first climbed by {v}.", "{v} first climbed {e}."), "Who first climbed {e}?"),
        A("climbed", "year", ("The first ascent of {e} was made in {v}.", "Nobody reached the summit of {e} before {v}.", "{e} was first climbed in {v}."), ("{e} was first climbed in {v}.",), "When was {e} first climbed?"),
        A("range", "range", ("{e} belongs to {v}.", "{e} is part of {v}.", "Among the peaks of {v}, {e} stands out."), ("It belongs to {v}.", "{e} is part of {v}."), "Which range is {e} part of?"),
        A("lake", "lake", ("At the foot of {e} lies {v}.", "Below {e} is a lake called {v}.", "{v} fills the valley under {e}."), ("Below it lies {v}.", "{v} lies below {e}."), "Which lake lies below {e}?"),
        A("animal", "animal", ("The slopes of {e} are home to {v}.", "Hikers on {e} often see {v}.", "{e} is known for its {v}."), ("Its slopes are home to {v}.", "{e} is home to {v}."), "What animals live on {e}?"),
        A("village", "place", ("The village of {v} sits at the base of {e}.", "Most climbers start from {v}, below {e}.", "The nearest village to {e} is {v}."), ("The village below it is {v}.", "{v} lies at the base of {e}."), "Which village lies at the base of {e}?"),
    ),
)
ENTITY_TYPES: dict[str, EntityType] = {t.name: t for t in (CITY, PERSON, COMPANY, RIVER, MOUNTAIN)}


@dataclass(frozen=True)
class Chunk:
    text: str  # opener + body: what the database stores
    body: str  # the sentences without the opener (used to write a whole article)
    attributes: tuple[str, ...]  # the facts this chunk states
    sentences: dict[str, str] = field(default_factory=dict)  # attribute -> its sentence as written here


@dataclass
class Entity:
    name: str
    etype: EntityType
    region: str  # shared by several entities of a world, so distractors share query words
    direction: str
    role: str
    facts: dict[str, str]  # attribute name -> value (verbatim string)
    intro_template: int  # index into etype.intro
    chunks: list[Chunk] = field(default_factory=list)

    def fill(self, template: str, value: str = "") -> str:
        s = template.format(e=self.name, v=value, region=self.region, dir=self.direction, role=self.role)
        return s[0].upper() + s[1:]

    @property
    def intro(self) -> str:
        return self.fill(self.etype.intro[self.intro_template])

    @property
    def article(self) -> str:
        """Intro + every chunk body: the whole entity as one plain passage."""
        return " ".join([self.intro, *(c.body for c in self.chunks)])

    def attribute(self, name: str) -> Attribute:
        return next(a for a in self.etype.attributes if a.name == name)

    def chunk_of(self, attribute: str) -> int:
        return next(i for i, c in enumerate(self.chunks) if attribute in c.attributes)


def make_entity(rng: random.Random, etype: EntityType, split: str, region: str, taken: set[str]) -> Entity:
    """Draw an entity of `etype` whose name is not in `taken` and whose values are distinct.

    Distinct values (as whole words, and distinct from the name and region) keep the invariants
    checkable: each key value occurs in exactly one chunk of its entity and never in the query.
    """
    while True:
        name = etype.name_format.format(n=draw_value(etype.name_kind, rng, split))
        if name not in taken:
            break
    facts: dict[str, str] = {}
    for attr in etype.attributes:
        while True:
            v = draw_value(attr.kind, rng, split)
            if not any(mentions(v, o) or mentions(o, v) for o in (*facts.values(), name, region)):
                facts[attr.name] = v
                break
    ent = Entity(
        name=name,
        etype=etype,
        region=region,
        direction=rng.choice(DIRECTIONS),
        role=rng.choice(etype.roles),
        facts=facts,
        intro_template=rng.randrange(len(etype.intro)),
    )
    ent.chunks = _make_chunks(ent, rng)
    return ent


_OPENERS = ("This passage is about {e}.", "On {e}:", "About {e}.", "Notes on {e}.")


def _make_chunks(ent: Entity, rng: random.Random) -> list[Chunk]:
    """Split the 7 facts over 3 or 4 chunks (sizes 2-3 or 1-2), each with 2-3 filler sentences."""
    names = [a.name for a in ent.etype.attributes]
    rng.shuffle(names)
    sizes = rng.choice(([2, 2, 3], [2, 3, 2], [3, 2, 2], [2, 2, 2, 1], [1, 2, 2, 2], [2, 1, 2, 2]))
    chunks, start = [], 0
    for size in sizes:
        group = names[start : start + size]
        start += size
        facts = {a: ent.fill(rng.choice(ent.attribute(a).chunk), ent.facts[a]) for a in group}
        sentences = list(facts.values())
        for f in rng.sample(ent.etype.fillers, rng.randint(2, 3)):
            sentences.insert(rng.randint(0, len(sentences)), ent.fill(f))
        body = " ".join(sentences)
        # Name the entity up front so a retriever can match the chunk to its query.
        chunks.append(Chunk(text=f"{ent.fill(rng.choice(_OPENERS))} {body}", body=body, attributes=tuple(group),
                            sentences=facts))
    return chunks
