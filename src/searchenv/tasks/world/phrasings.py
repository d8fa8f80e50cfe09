"""The phrasing tables of :mod:`searchenv.tasks.world.render`: eight or more wordings per fact.

Each entry is a template with slots (``{s}`` the subject, ``{q}`` another entity, ...) that
:mod:`~searchenv.tasks.world.render` fills; changing a wording changes the generated corpus, so
bump ``searchenv.tasks.synthetic.GENERATOR_VERSION`` with it.
"""

from __future__ import annotations

# Openings name the subject in full and state no fact a question asks about.
_OPEN_PERSON = (
    "{n} is the subject of this article.",
    "This passage is about {n}.",
    "{n} appears in many accounts of the period.",
    "The life of {n} is well documented.",
    "Much has been written about {n}.",
    "{n} is remembered by many who knew {pp} work.",
    "Records about {n} survive in several archives.",
    "{n} is a figure of some local fame.",
)
_OPEN_CAREER = (
    "This passage describes the working life of {n}.",
    "The career of {n} is summarised here.",
    "{n} had a long working life.",
    "Much of the working life of {n} is documented.",
    "{n} worked for most of {pp} adult life.",
    "The professional record of {n} is set out below.",
    "Colleagues of {n} left accounts of {pp} work.",
    "{n} kept busy with work for decades.",
)
_OPEN_PERSONAL = (
    "This passage covers the private life of {n}.",
    "Little is known of the early private life of {n}.",
    "The family life of {n} is described here.",
    "{n} kept {pp} private life out of the public eye.",
    "Letters of {n} tell of {pp} family.",
    "Friends of {n} wrote about {pp} home life.",
    "The household of {n} was a lively one.",
    "Some details of the personal life of {n} survive.",
)
_OPEN_WORKS = (
    "{n} left a considerable body of work.",
    "This passage lists what {n} made.",
    "The output of {n} spans several decades.",
    "{n} was productive over a long period.",
    "The achievements of {n} are listed here.",
    "What {n} created is summarised below.",
    "{n} is credited with several lasting works.",
    "Several works and ventures are due to {n}.",
)
_BIRTH = (
    "{s} was born in {c} in {y}.",
    "Born in {c} in {y}, {s} grew up there.",
    "{s} was born in {y} in the city of {c}.",
    "In {y}, {s} was born in {c}.",
    "{c} is where {s} was born, in {y}.",
    "{sp} birth took place in {c} in {y}.",
    "{s} came into the world in {c} in {y}.",
    "The records of {c} list the birth of {s} in {y}.",
)
_OCCUPATION = (
    "{s} is {a} {occ}.",
    "{s} works as {a} {occ}.",
    "By profession, {s} is {a} {occ}.",
    "{sp} occupation is that of {a} {occ}.",
    "{s} trained as {a} {occ}.",
    "{s} made a living as {a} {occ}.",
    "{s} is known as {a} {occ}.",
    "{s} followed a career as {a} {occ}.",
)
_NATIONALITY = (
    "{s} is a citizen of {k}.",
    "{s} holds the citizenship of {k}.",
    "By nationality, {s} belongs to {k}.",
    "{sp} nationality is that of {k}.",
    "{s} carries a passport of {k}.",
    "{k} is the country of which {s} is a citizen.",
    "{s} is a national of {k}.",
    "As a citizen of {k}, {s} travelled widely.",
)
_EDUCATION = (
    "{s} studied at {u}.",
    "{s} graduated from {u}.",
    "{s} is an alumnus of {u}.",
    "{sp} studies were completed at {u}.",
    "{s} earned a degree at {u}.",
    "{u} is where {s} was educated.",
    "{s} attended {u} as a student.",
    "After school, {s} enrolled at {u}.",
)
_MOVED = (
    "Later in life, {s} moved to {c}.",
    "{s} spent many years living in {c}.",
    "For a time, {s} kept a house in {c}.",
    "{s} settled in {c} in later years.",
    "{sp} final years were spent in {c}.",
    "{s} lived for a decade in {c}.",
    "{c} became the home of {s} later on.",
    "{s} relocated to {c} after some years.",
)
_EMPLOYER = (
    "As {a} {occ}, {s} worked for {o}.",
    "{s} was employed by {o} as {a} {occ}.",
    "{s} joined {o} and worked there as {a} {occ}.",
    "{o} employed {s} as {a} {occ}.",
    "{sp} employer was {o}, for which {pr} worked as {a} {occ}.",
    "{s} spent {pp} career at {o}, working as {a} {occ}.",
    "For many years {s} worked as {a} {occ} at {o}.",
    "{o} was where {s} worked, as {a} {occ}.",
)
_SPOUSE = (
    "{s} was married to {p}.",
    "{sp} spouse was {p}.",
    "{s} married {p}.",
    "{s} and {p} were married.",
    "{s} and {p} were married for many years.",
    "{s} took {p} as a spouse.",
    "{p} became the spouse of {s}.",
    "{s} wed {p}.",
)
# Sentences that introduce another person, whose fact follows in the same phrasings.
_ACQUAINTANCE = (
    "{s} was close to {q}.",
    "{s} often met {q}.",
    "A friend of {s} was {q}.",
    "{s} corresponded with {q} for years.",
)
_COLLEAGUE = (
    "{s} worked alongside {q} for a while.",
    "{s} often collaborated with {q}.",
    "A rival of {s} was {q}.",
    "{s} was frequently compared with {q}.",
)
_NEIGHBOUR = (
    "Neighbours of {s} included {q}.",
    "{s} was a friend of {q}.",
    "{s} often visited {q}.",
    "A cousin of {s} was {q}.",
)
_WORKS = {
    "film": (
        "Films directed by {s} include {w}.",
        "{s} directed {w}.",
        "{s} is the director of {w}.",
        "Among the films {s} directed are {w}.",
        "{sp} films as director include {w}.",
        "{s} made the films {w}.",
        "The directing credits of {s} include {w}.",
        "{s} is credited as director of {w}.",
    ),
    "novel": (
        "Novels by {s} include {w}.",
        "{s} wrote {w}.",
        "{s} is the author of {w}.",
        "Among the novels {s} wrote are {w}.",
        "{sp} novels include {w}.",
        "{s} published the novels {w}.",
        "The books of {s} include {w}.",
        "{s} is credited as the author of {w}.",
    ),
    "opera": (
        "Operas by {s} include {w}.",
        "{s} composed {w}.",
        "{s} wrote the music of {w}.",
        "Among the operas {s} composed are {w}.",
        "{sp} operas include {w}.",
        "{s} is the composer of {w}.",
        "The stage works of {s} include {w}.",
        "{s} set to music the operas {w}.",
    ),
}
_FOUNDED = (
    "In {y}, {s} founded {o}.",
    "{s} established {o} in {y}.",
    "{s} was the founder of {o}, created in {y}.",
    "{o} was founded by {s} in {y}.",
    "{s} started {o} in {y}.",
    "{s} set up {o} in {y}.",
    "It was in {y} that {s} founded {o}.",
    "{o}, which {s} founded in {y}, still exists.",
)
_PERSON_FILLER = (
    "{s} rarely spoke about family life in public.",
    "Friends recalled that {s} was a keen gardener.",
    "{s} enjoyed long walks and chess.",
    "{s} gave many public lectures over the years.",
    "Colleagues described {s} as meticulous.",
    "{s} kept detailed diaries that survive today.",
    "{s} received several honours late in life.",
    "{s} kept working on new projects until late in life.",
    "Drafts and notes by {s} are kept in private collections.",
    "{s} was known for a dry sense of humour.",
    "{s} travelled often, mostly by train.",
    "Portraits of {s} hang in a small gallery.",
)
# Work passages: creator and year are separate sentences, each with its own phrasings. Every
# phrasing of a fact keeps a word its questions use ("directed", "founded", "located"), so a
# lexical retriever can still find the passage from a well-formed sub-question; word order, the
# fact's position and how the subject is named vary.
_CREATOR = {
    "film": (
        "{s} was directed by {p}.",
        "{p} directed {s}.",
        "{s} is a film directed by {p}.",
        "{s}, a film directed by {p}, drew large crowds.",
        "It was {p} who directed {s}.",
        "{s} was directed by {p} on a small budget.",
        "{p} directed {s} on location.",
        "Directed by {p}, {s} found a wide audience.",
    ),
    "novel": (
        "{s} was written by {p}.",
        "{s} was written by the author {p}.",
        "{s} is a novel written by {p}.",
        "{s}, a novel written by {p}, sold well.",
        "It was {p} who had written {s}.",
        "{s} was written by {p} over several years.",
        "The author {p} has written {s}.",
        "Written by {p}, {s} found many readers.",
    ),
    "opera": (
        "{s} was composed by {p}.",
        "{p} composed {s}.",
        "{s} is an opera composed by {p}.",
        "{s}, an opera composed by {p}, is often staged.",
        "It was {p} who composed {s}.",
        "{s} was composed by {p} for a small company.",
        "{p} composed {s} in a few months.",
        "Composed by {p}, {s} drew large audiences.",
    ),
}
_WORK_YEAR = {
    "film": (
        "{s} was released in {y}.",
        "{s} came out in {y}.",
        "The release of {s} took place in {y}.",
        "{s} premiered in {y}.",
        "In {y}, {s} was released.",
        "{y} saw the release of {s}.",
        "{s} reached cinemas in {y}.",
        "{s} first appeared in {y}.",
    ),
    "novel": (
        "{s} was published in {y}.",
        "{s} came out in {y}.",
        "The publication of {s} took place in {y}.",
        "{s} first appeared in print in {y}.",
        "In {y}, {s} was published.",
        "{y} saw the publication of {s}.",
        "{s} reached bookshops in {y}.",
        "{s} was first printed in {y}.",
    ),
    "opera": (
        "{s} was first performed in {y}.",
        "{s} premiered in {y}.",
        "The first performance of {s} took place in {y}.",
        "{s} was first staged in {y}.",
        "In {y}, {s} was first performed.",
        "{y} saw the premiere of {s}.",
        "{s} reached the stage in {y}.",
        "{s} opened in {y}.",
    ),
}
_WORK_OTHER = (
    "{s} is often confused with {q}.",
    "{s} is frequently compared with {q}.",
    "Critics set {s} beside {q}.",
    "{s} shares a theme with {q}.",
)
_WORK_FILLER = (
    "The story is set in {c}.",
    "It was received warmly by audiences in {c}.",
    "Critics noted its unusual structure.",
    "It has been revived several times since.",
    "A restored version appeared decades later.",
    "Early reviews were divided.",
)
_CITY = (
    "{s} is a city located in the country of {k}.",
    "The city of {s} is located in {k}.",
    "{s} lies in the country of {k}.",
    "{s} is one of the cities located in {k}.",
    "{s} belongs to the country of {k}.",
    "{k} is the country where {s} is located.",
    "Located in {k}, {s} is a mid-sized city.",
    "{s} is a city in the country of {k}.",
)
_CAPITAL_OF = (
    "{s} is the capital of {k}.",
    "{s} serves as the capital city of {k}.",
    "{s} has been the seat of government of {k}, its capital.",
    "The capital of {k} is {s}.",
    "{k} is governed from {s}, its capital.",
    "{s} is the capital city of {k}.",
    "As the capital of {k}, {s} hosts its parliament.",
    "{k} chose {s} as its capital.",
)
_CITY_OTHER = ("{s} is sometimes confused with {q}.", "{s} has long traded with {q}.", "{s} is twinned with {q}.")
_COUNTRY = (
    "{s} is a country whose capital city is {c}.",
    "The capital city of {s} is {c}.",
    "{s} is a republic governed from its capital, the city of {c}.",
    "{c} is the capital of {s}.",
    "{sp} capital is {c}.",
    "The seat of government of {s} is the city of {c}.",
    "{s} has {c} as its capital.",
    "{s} is governed from {c}, its capital.",
)
_COUNTRY_OTHER = ("{s} borders {q}.", "{s} has long traded with {q}.", "{s} is often compared with {q}.")
_ORG_FOUNDED = (
    "{s} was founded by {p} in {y}.",
    "{p} founded {s} in {y}.",
    "Founded in {y} by {p}, {s} grew steadily.",
    "{s} was founded in {y} by {p}.",
    "In {y}, {p} founded {s}.",
    "{p} founded {s} back in {y}.",
    "It was {p} who founded {s}, in {y}.",
    "{s} dates from {y}, when {p} founded it.",
)
_INDUSTRY = (
    "{s} is a {ind} company.",
    "{s} works in the {ind} industry.",
    "The business of {s} is {ind}.",
    "{s} is active in {ind}.",
    "{sp} industry is {ind}.",
    "{s} operates in the {ind} trade.",
    "{s} is known as a {ind} firm.",
    "{s} makes its money in {ind}.",
)
_HQ = (
    "{s} is headquartered in the city of {c}.",
    "The headquarters of {s} are in {c}.",
    "{s} is headquartered in {c}.",
    "{sp} headquarters are in the city of {c}.",
    "{s} has its headquarters in {c}.",
    "{c} is home to the headquarters of {s}.",
    "{s} is headquartered in {c}, a city it has never left.",
    "The headquarters of {s} stand in {c}.",
)
_ORG_OTHER = (
    "{s} competes with {q}.",
    "{s} is often confused with {q}.",
    "A rival of {s} is {q}.",
    "{s} once tried to buy {q}.",
)
_UNI_CITY = (
    "{s} is a university located in the city of {c}.",
    "{s} is located in the city of {c}.",
    "The campus of {s} is located in {c}.",
    "{s} stands in the city of {c}.",
    "{c} is home to {s}.",
    "{s} is a university in {c}.",
    "{sp} buildings are located in {c}.",
    "{s} has its campus in the city of {c}.",
)
_UNI_YEAR = (
    "{s} was established in {y}.",
    "{s} was founded in {y}.",
    "{s} was established back in {y}.",
    "Its founders established {s} in {y}.",
    "In {y}, {s} was established.",
    "{s} opened its doors in {y}, when it was established.",
    "{y} saw {s} established.",
    "{s} was established in {y} and admitted students soon after.",
)
_UNI_OTHER = ("{s} exchanges students with {q}.", "{s} is often compared with {q}.", "A rival of {s} is {q}.")
_PLACE_FILLER = (
    "It is known for its covered markets.",
    "It grew around a river crossing.",
    "Its old town has narrow streets and stone bridges.",
    "It hosts a yearly music festival.",
    "It has a long coastline.",
    "It is known for its mountain passes.",
    "Its economy relies on trade.",
    "Its libraries hold old maps.",
)
_ORG_FILLER = (
    "It publishes a yearly report.",
    "It employs several hundred people.",
    "Its early years were difficult.",
    "It has offices in several countries.",
    "Its archives are open to researchers.",
)
_UNI_FILLER = (
    "It is known for its library.",
    "Its students publish a weekly paper.",
    "It has a botanical garden.",
    "It offers evening courses.",
)

# List passages (people from a city, alumni, staff, other cities of a country).
_NATIVES = (
    "Notable people born in {c} include {ps}.",
    "{ps} were all born in {c}.",
    "{c} is the birthplace of {ps}.",
)
_NATIVE_ONE = (
    "A notable person born in {c} is {ps}.",
    "{ps} was born in {c}.",
    "{c} is the birthplace of {ps}.",
)
_COUNTRY_CITIES = (
    "Other cities of {k} include {cs}.",
    "Besides the capital, {k} has cities such as {cs}.",
    "{cs} are also in {k}.",
)
_EMPLOYEES = (
    "Employees of {o} have included {ps}.",
    "{ps} worked for {o}.",
    "People employed by {o} include {ps}.",
)
_ALUMNI = (
    "Alumni of {u} include {ps}.",
    "{ps} studied at {u}.",
    "Graduates of {u} include {ps}.",
)
_TOPICS = (
    "river navigation",
    "the history of printing",
    "glass furnaces",
    "tidal charts",
    "public libraries",
    "orchard grafting",
    "bridge design",
    "folk music",
    "census methods",
    "lighthouse lenses",
)
_RESIDENTS = ("Later residents of {c} have included {ps}.", "{ps} also lived in {c} for a time.")
