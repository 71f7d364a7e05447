"""Word lists for the in-context skill tasks (State Soup, Pióro et al. 2024, appendix A, after
Todd et al. 2024). Pure data; the tasks themselves are built in skills.py.

Each list holds >= 40 items so that k-shot demonstrations and held-out queries never overlap.
"""

COUNTRY_CAPITAL = [
    ("Egypt", "Cairo"), ("Poland", "Warsaw"), ("France", "Paris"), ("Germany", "Berlin"),
    ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"), ("Greece", "Athens"),
    ("Austria", "Vienna"), ("Hungary", "Budapest"), ("Sweden", "Stockholm"), ("Norway", "Oslo"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Ireland", "Dublin"), ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam"), ("Switzerland", "Bern"), ("Czechia", "Prague"), ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Ukraine", "Kyiv"),
    ("Russia", "Moscow"), ("Turkey", "Ankara"), ("Japan", "Tokyo"), ("China", "Beijing"),
    ("India", "New Delhi"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"),
    ("Philippines", "Manila"), ("Malaysia", "Kuala Lumpur"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
    ("Syria", "Damascus"), ("Lebanon", "Beirut"), ("Jordan", "Amman"), ("Kenya", "Nairobi"),
    ("Ethiopia", "Addis Ababa"), ("Nigeria", "Abuja"), ("Ghana", "Accra"), ("Senegal", "Dakar"),
    ("Morocco", "Rabat"), ("Tunisia", "Tunis"), ("Peru", "Lima"), ("Chile", "Santiago"),
    ("Argentina", "Buenos Aires"), ("Colombia", "Bogota"), ("Venezuela", "Caracas"), ("Cuba", "Havana"),
    ("Mexico", "Mexico City"), ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Nepal", "Kathmandu"),
]

# Common lowercase words for the letter and capitalisation tasks.
WORDS = (
    "apple river garden window mirror python finch lantern harbour candle forest valley bridge "
    "castle pencil rabbit silver thunder orange market winter summer island doctor meadow "
    "violin bottle hammer jacket ladder monkey needle pepper rocket saddle tiger wagon "
    "yellow zebra anchor basket cabbage dragon engine falcon guitar helmet igloo jungle kettle "
    "lemon marble nickel oyster parrot quartz ribbon spider tunnel umbrella velvet walnut"
).split()

SINGULAR_PLURAL = [
    ("bat", "bats"), ("mouse", "mice"), ("child", "children"), ("foot", "feet"), ("tooth", "teeth"),
    ("goose", "geese"), ("man", "men"), ("woman", "women"), ("box", "boxes"), ("city", "cities"),
    ("baby", "babies"), ("knife", "knives"), ("leaf", "leaves"), ("wolf", "wolves"), ("bus", "buses"),
    ("church", "churches"), ("dish", "dishes"), ("potato", "potatoes"), ("hero", "heroes"),
    ("cat", "cats"), ("dog", "dogs"), ("house", "houses"), ("tree", "trees"), ("car", "cars"),
    ("book", "books"), ("chair", "chairs"), ("table", "tables"), ("river", "rivers"), ("horse", "horses"),
    ("bird", "birds"), ("flower", "flowers"), ("cloud", "clouds"), ("story", "stories"),
    ("party", "parties"), ("glass", "glasses"), ("watch", "watches"), ("fox", "foxes"),
    ("shelf", "shelves"), ("life", "lives"), ("person", "people"), ("ox", "oxen"), ("cactus", "cacti"),
    ("lady", "ladies"), ("key", "keys"), ("toy", "toys"), ("day", "days"), ("brush", "brushes"),
    ("wish", "wishes"), ("coin", "coins"), ("road", "roads"), ("song", "songs"), ("ship", "ships"),
    ("star", "stars"), ("stone", "stones"), ("boat", "boats"), ("door", "doors"),
]

PRESENT_PAST = [
    ("assist", "assisted"), ("speak", "spoke"), ("walk", "walked"), ("run", "ran"), ("eat", "ate"),
    ("go", "went"), ("see", "saw"), ("take", "took"), ("give", "gave"), ("write", "wrote"),
    ("read", "read"), ("sing", "sang"), ("swim", "swam"), ("drink", "drank"), ("begin", "began"),
    ("break", "broke"), ("bring", "brought"), ("buy", "bought"), ("catch", "caught"), ("teach", "taught"),
    ("think", "thought"), ("fly", "flew"), ("draw", "drew"), ("grow", "grew"), ("know", "knew"),
    ("throw", "threw"), ("fall", "fell"), ("feel", "felt"), ("keep", "kept"), ("sleep", "slept"),
    ("leave", "left"), ("meet", "met"), ("sit", "sat"), ("stand", "stood"), ("win", "won"),
    ("lose", "lost"), ("make", "made"), ("find", "found"), ("tell", "told"), ("sell", "sold"),
    ("jump", "jumped"), ("play", "played"), ("cook", "cooked"), ("open", "opened"), ("close", "closed"),
    ("help", "helped"), ("call", "called"), ("ask", "asked"), ("carry", "carried"), ("try", "tried"),
    ("stop", "stopped"), ("plan", "planned"), ("dance", "danced"), ("paint", "painted"),
    ("climb", "climbed"), ("build", "built"),
]

ANTONYM = [
    ("flawed", "perfect"), ("unrelated", "related"), ("hot", "cold"), ("big", "small"), ("tall", "short"),
    ("fast", "slow"), ("happy", "sad"), ("light", "dark"), ("open", "closed"), ("rich", "poor"),
    ("strong", "weak"), ("young", "old"), ("early", "late"), ("full", "empty"), ("hard", "soft"),
    ("high", "low"), ("loud", "quiet"), ("wet", "dry"), ("clean", "dirty"), ("near", "far"),
    ("thick", "thin"), ("wide", "narrow"), ("heavy", "light"), ("true", "false"), ("good", "bad"),
    ("love", "hate"), ("win", "lose"), ("buy", "sell"), ("push", "pull"), ("give", "take"),
    ("begin", "end"), ("above", "below"), ("inside", "outside"), ("always", "never"), ("before", "after"),
    ("friend", "enemy"), ("brave", "cowardly"), ("cheap", "expensive"), ("safe", "dangerous"),
    ("sharp", "blunt"), ("sweet", "bitter"), ("smooth", "rough"), ("deep", "shallow"), ("polite", "rude"),
    ("ancient", "modern"), ("arrive", "depart"), ("accept", "refuse"), ("increase", "decrease"),
    ("victory", "defeat"), ("question", "answer"), ("north", "south"), ("east", "west"), ("up", "down"),
    ("day", "night"), ("entrance", "exit"), ("maximum", "minimum"),
]

ENGLISH_FRENCH = [
    ("satisfy", "satisfaire"), ("here", "ici"), ("house", "maison"), ("dog", "chien"), ("cat", "chat"),
    ("water", "eau"), ("bread", "pain"), ("book", "livre"), ("tree", "arbre"), ("sun", "soleil"),
    ("moon", "lune"), ("sea", "mer"), ("city", "ville"), ("friend", "ami"), ("school", "école"),
    ("red", "rouge"), ("green", "vert"), ("white", "blanc"), ("black", "noir"), ("small", "petit"),
    ("big", "grand"), ("new", "nouveau"), ("old", "vieux"), ("good", "bon"), ("day", "jour"),
    ("night", "nuit"), ("morning", "matin"), ("year", "année"), ("car", "voiture"), ("road", "route"),
    ("door", "porte"), ("window", "fenêtre"), ("table", "table"), ("chair", "chaise"), ("bed", "lit"),
    ("apple", "pomme"), ("cheese", "fromage"), ("milk", "lait"), ("wine", "vin"), ("flower", "fleur"),
    ("bird", "oiseau"), ("fish", "poisson"), ("horse", "cheval"), ("mountain", "montagne"),
    ("river", "rivière"), ("world", "monde"), ("head", "tête"), ("hand", "main"), ("eye", "œil"),
    ("heart", "cœur"), ("always", "toujours"), ("never", "jamais"), ("today", "aujourd'hui"),
    ("thank you", "merci"), ("please", "s'il vous plaît"), ("yes", "oui"),
]

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_word(n: int) -> str:
    """English words for 0 <= n < 100 ('forty-two')."""
    if not 0 <= n < 100:
        raise ValueError(f"number_word takes 0..99, got {n}")
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + ("" if ones == 0 else "-" + _ONES[ones])
