#!/usr/bin/env python3
"""Question-answering cases over long documents for `chorus eval needle --cases-file` (issue 19):
JSONL, one case per line: {"document", "question", "answer", "lead", "depth", "kind"}. The agent is
asked the question after the document and its answer is led in with `lead`, so the gold answer is
the first thing it writes (exact answer and the gold answer's teacher-forced NLL, docs/EVAL.md).

    python3 scripts/make_needle_cases.py OUT.jsonl [--corpus NAME=PATH ...] [--needle N] [--read N]
        [--min-tokens 2000] [--max-tokens 2400] [--seed 1] [--questions Q]

N documents per corpus (needle) and N articles (read), Q cases (questions) on each document.

Two kinds of case, both deterministic for a seed:

  needle:NAME  an excerpt of corpus NAME (started at a line) with 3 facts "The access code for the
               {key} is {4 digits}." planted after sentence or line ends at random depths (5-95 %),
               distinct keys and codes; the question asks one of them (the others are distractors of
               the same phrasing). N cases per corpus.
  read:TYPE    a generated article about fictional towns — every paragraph one town, with its
               founding year, mayor, population and festival date, plus value-free description — in
               which every year, name, number and date occurs once; the question asks one of them
               (TYPE = year, name, number or date). No outside text: the article is made here.

Lengths are targets in tokens, converted with a characters-per-token estimate per corpus (SmolLM2's
tokenizer, measured: see CHARS_PER_TOKEN); the evaluation reports the real token counts.
Corpora: WikiText-2 test (../shared/data/wikitext-2/test.txt, docs/EVAL.md) and the texts of
scripts/make_corpora.py (code, docs, chat).
"""
import argparse
import json
import random

# Characters per SmolLM2 token, measured on these corpora (chorus's tokenizer; see
# docs/results/allocator.md, "Cocktail with power"); unknown corpora use the default.
CHARS_PER_TOKEN = {"wiki": 4.2, "code": 3.3, "docs": 3.8, "chat": 4.3, "read": 4.6}
DEFAULT_CPT = 4.0

KEYS = ["north gate", "blue warehouse", "east tower", "river laboratory", "old library", "red bunker",
        "west harbor", "glass dome", "south bridge", "iron vault", "green depot", "silver hangar",
        "copper mill", "amber station", "stone cellar", "harbor office", "upper archive", "coral dock"]


def needle_cases(rng, corpus, name, target_tokens, questions=1):
    """One document, `questions` cases on it (distinct planted facts; 3 facts, or questions + 1)."""
    facts = max(3, questions + 1) if questions > 1 else 3
    cpt = CHARS_PER_TOKEN.get(name, DEFAULT_CPT)
    want = int(target_tokens * cpt) - 60 * facts
    start = rng.randrange(0, max(1, len(corpus) - want - 1))
    nl = corpus.find("\n", start)
    start = 0 if nl < 0 or nl + 1 + want > len(corpus) else nl + 1
    doc = corpus[start:start + want]
    keys = rng.sample(KEYS, facts)
    codes = []
    while len(codes) < facts:
        c = str(rng.randint(1000, 9999))
        if c not in codes: codes.append(c)
    asked_list = rng.sample(range(facts), questions)
    spots = []
    for f in range(facts):
        at = len(doc) * rng.randint(5, 95) // 100
        cands = [p for p in (doc.find(". ", at), doc.find("\n", at)) if p >= 0]
        p = min(cands) + 1 if cands else len(doc)
        spots.append((p, f))
    # Insert from the end so earlier positions stay valid; then find the asked fact's position.
    for p, f in sorted(spots, reverse=True):
        doc = doc[:p] + f" The access code for the {keys[f]} is {codes[f]}." + doc[p:]
    out = []
    for asked in asked_list:
        fact = f"The access code for the {keys[asked]} is {codes[asked]}."
        out.append({"document": doc, "question": f"What is the access code for the {keys[asked]}?",
                    "answer": codes[asked], "lead": f"The access code for the {keys[asked]} is",
                    "depth": round(doc.find(fact) / len(doc), 4), "kind": f"needle:{name}"})
    return out


SYL = ["bar", "ven", "tor", "mal", "kes", "dor", "lin", "ham", "wick", "stad", "ber", "gan", "ros", "tel", "mor",
       "quin", "sel", "vark", "hol", "dun", "fen", "carr", "brin", "olm"]
FIRST = ["Maria", "Jonas", "Elena", "Tomas", "Ada", "Felix", "Irene", "Oskar", "Lena", "Pavel", "Nora", "Hugo",
         "Clara", "Anton", "Vera", "Emil", "Greta", "Milan", "Sofia", "Karl", "Rosa", "Ivo", "Hanna", "Leon"]
LAST = ["Kessel", "Brandt", "Moreau", "Halvorsen", "Ricci", "Novak", "Lindqvist", "Okafor", "Serrano", "Dubois",
        "Varga", "Holm", "Castell", "Petrov", "Amsel", "Quist", "Marlow", "Ferreira", "Szabo", "Lund", "Orban",
        "Tanaka", "Weiss", "Costa"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
FESTIVALS = ["lantern festival", "harvest fair", "river regatta", "spring market", "music week", "flower parade",
             "winter carnival", "founders' day", "bread festival", "kite contest"]
FILLER = [
    "Its old quarter is a maze of narrow streets lined with {tree} trees and small workshops.",
    "Most visitors arrive by the {transport} and stay near the market square.",
    "The surrounding hills are used for {crop} and for grazing sheep.",
    "A stone bridge crosses the river below the church, and a path follows the bank to the next village.",
    "The local museum keeps tools, maps and letters from the early settlers.",
    "In summer the {crop} fields turn the valley yellow, and the cafés stay open late.",
    "The school, the post office and the library share one long building on the main road.",
    "Fishing was once the main trade, but today most people work in {trade}.",
    "The climate is mild, with wet winters and dry, windy summers.",
    "A weekly market sells cheese, honey, {crop} and woollen goods from the farms around.",
]
TREES = ["linden", "chestnut", "plane", "olive", "birch", "maple"]
TRANSPORT = ["regional train", "coastal road", "ferry", "mountain bus"]
CROPS = ["barley", "sunflowers", "grapes", "rye", "lavender", "apples"]
TRADES = ["tourism", "light industry", "the regional hospital", "software firms", "the port"]


def fresh(seen, make):
    """A value of make() not in `seen` (added to it)."""
    while True:
        v = make()
        if v not in seen:
            seen.add(v)
            return v


def read_cases(rng, target_tokens, questions=1):
    """One generated article, `questions` cases on it (distinct facts)."""
    chars = int(target_tokens * CHARS_PER_TOKEN["read"])
    towns, names, years, pops, dates = set(), set(), set(), set(), set()
    paras, facts = [], []
    total = 0
    while total < chars:
        t = fresh(towns, lambda: "".join(rng.sample(SYL, 2)).capitalize())
        n = fresh(names, lambda: f"{rng.choice(FIRST)} {rng.choice(LAST)}")
        y = fresh(years, lambda: str(rng.randint(1150, 1950)))
        p = fresh(pops, lambda: str(rng.randint(2000, 98000)))
        d = fresh(dates, lambda: f"{rng.choice(MONTHS)} {rng.randint(1, 28)}")
        fest = rng.choice(FESTIVALS)
        sentences = [
            (f"{t} was founded in {y}.", ("year", f"In which year was {t} founded?", f"{t} was founded in", y)),
            (f"The mayor of {t} is {n}.", ("name", f"Who is the mayor of {t}?", f"The mayor of {t} is", n)),
            (f"{t} has a population of {p}.", ("number", f"What is the population of {t}?", f"{t} has a population of", p)),
            (f"The {fest} of {t} takes place on {d}.",
             ("date", f"When does the {fest} of {t} take place?", f"The {fest} of {t} takes place on", d)),
        ]
        fill = [s.format(tree=rng.choice(TREES), transport=rng.choice(TRANSPORT), crop=rng.choice(CROPS),
                         trade=rng.choice(TRADES)) for s in rng.sample(FILLER, 3)]
        body = [s for s, _ in sentences] + fill
        rng.shuffle(body)
        para = " ".join(body)
        for s, f in sentences: facts.append((total + para.find(s), s, f))
        paras.append(para)
        total += len(para) + 2
    doc = "\n\n".join(paras)
    # The asked value occurs exactly once in the article (a year may not hide inside a population).
    out = []
    for at, sentence, (typ, q, lead, ans) in rng.sample([f for f in facts if doc.count(f[2][3]) == 1], questions):
        assert doc.find(sentence) == at
        out.append({"document": doc, "question": q, "answer": ans, "lead": lead, "depth": round(at / len(doc), 4),
                    "kind": f"read:{typ}"})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--corpus", action="append", default=[], help="NAME=PATH (needle cases from this text)")
    ap.add_argument("--needle", type=int, default=0, help="needle cases per corpus")
    ap.add_argument("--read", type=int, default=0, help="read-from-text cases (generated articles)")
    ap.add_argument("--min-tokens", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=2400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--questions", type=int, default=1,
                    help="cases per document (consecutive lines with the same document: `eval needle` prefills a "
                         "uniform context once for them, and with --shared-questions makes one Cocktail context for "
                         "all of them); needle documents get max(3, questions + 1) facts")
    a = ap.parse_args()
    if a.min_tokens < 256 or a.max_tokens < a.min_tokens: ap.error("need 256 <= --min-tokens <= --max-tokens")
    rng = random.Random(a.seed)
    cases = []
    for spec in a.corpus:
        name, _, path = spec.partition("=")
        if not path: ap.error(f"--corpus {spec}: write NAME=PATH")
        text = open(path, encoding="utf-8").read()
        if len(text) < 3 * a.max_tokens * CHARS_PER_TOKEN.get(name, DEFAULT_CPT):
            ap.error(f"corpus {name} ({path}) has {len(text)} characters: too short for {a.max_tokens}-token documents")
        for _ in range(a.needle):
            cases += needle_cases(rng, text, name, rng.randint(a.min_tokens, a.max_tokens), a.questions)
    for _ in range(a.read):
        cases += read_cases(rng, rng.randint(a.min_tokens, a.max_tokens), a.questions)
    with open(a.out, "w", encoding="utf-8") as f:
        for c in cases: f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases -> {a.out}")


if __name__ == "__main__":
    main()
