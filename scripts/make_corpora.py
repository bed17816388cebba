#!/usr/bin/env python3
"""Text corpora of other kinds than WikiText-2, for evaluating KV compression on any text (issue 19).

    python3 scripts/make_corpora.py OUT_DIR [--commit REV] [--bytes N]

writes OUT_DIR/code.txt, OUT_DIR/docs.txt and OUT_DIR/chat.txt, each about N bytes (default 200000):

  code.txt  source code: this repository's own C++ sources (src/, tools/, tests/ *.cc and *.h) as of
            git revision REV, files in a seeded shuffled order, each preceded by a "// file: PATH" line.
            License: the repository's own.
  docs.txt  technical documentation: this repository's Markdown documentation (README.md, docs/*.md,
            docs/results/*.md) as of REV, in a seeded shuffled order. License: the repository's own.
  chat.txt  conversational text: generated here — dialogues between two people (support calls, trip
            planning, cooking, study sessions, appointments, small talk) from templates with seeded
            random names, places, numbers and dates. No outside text.

REV defaults to the commit the numbers in docs/results/allocator.md were measured with, so the corpora
are the same bytes on every clone that has that history (`git show REV:PATH`); the script only reads
the repository. WikiText-2 itself is not generated: put it at ../shared/data/wikitext-2/test.txt
(see docs/EVAL.md), or give its path to the evaluation.
"""
import argparse
import random
import subprocess
import sys
from pathlib import Path

DEFAULT_REV = "1dd3436"  # main when issue 19's corpora were first cut (2026-12-01)
ROOT = Path(__file__).resolve().parent.parent


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def files_at(rev, prefixes, suffixes):
    names = git("ls-tree", "-r", "--name-only", rev).splitlines()
    return sorted(n for n in names if n.startswith(prefixes) and n.endswith(suffixes))


def concat(rev, names, limit, header, seed):
    rng = random.Random(seed)
    names = list(names)
    rng.shuffle(names)
    out, size = [], 0
    for n in names:
        text = git("show", f"{rev}:{n}")
        piece = f"{header.format(path=n)}\n{text.rstrip()}\n\n"
        out.append(piece)
        size += len(piece.encode())
        if size >= limit:
            break
    return "".join(out)


# --- conversational text -----------------------------------------------------------------------
NAMES = ["Maya", "Tom", "Priya", "Jonas", "Lena", "Omar", "Sofia", "Kenji", "Ana", "David", "Chloe", "Mateo",
         "Grace", "Ravi", "Ingrid", "Samuel", "Yara", "Felix", "Nora", "Lucas", "Amara", "Hugo", "Elif", "Ben"]
CITIES = ["Lisbon", "Kyoto", "Toronto", "Nairobi", "Oslo", "Lima", "Prague", "Hanoi", "Dublin", "Porto",
          "Seoul", "Vienna", "Cape Town", "Montreal", "Krakow", "Valencia"]
DEVICES = ["laptop", "router", "printer", "phone", "tablet", "smart TV", "headset", "external drive"]
DISHES = ["lentil soup", "mushroom risotto", "banana bread", "chicken curry", "vegetable lasagna", "fish tacos",
          "apple crumble", "pad thai", "shakshuka", "potato gratin"]
SUBJECTS = ["linear algebra", "organic chemistry", "European history", "statistics", "French grammar",
            "microeconomics", "cell biology", "thermodynamics"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
FILLERS = ["Hmm, let me think.", "Right.", "Okay, that makes sense.", "Oh, I didn't know that.", "Sure.",
           "Honestly, I'm not sure.", "Ha, fair enough.", "Wait, really?", "Got it.", "That's a good point."]


def support(r, a, b):
    dev, n = r.choice(DEVICES), r.randint(2, 9)
    code = f"{r.choice('ABCDEFGH')}{r.randint(100, 999)}-{r.randint(10, 99)}"
    return [
        (b, f"Thanks for calling, this is {b}. How can I help you today?"),
        (a, f"Hi, my {dev} stopped working properly about {n} days ago. It keeps restarting on its own."),
        (b, f"I'm sorry to hear that. Could you read me the model number on the back? It usually starts with a letter."),
        (a, f"Sure, it says {code}."),
        (b, f"Thank you. And have you tried unplugging it for at least {r.randint(10, 60)} seconds?"),
        (a, r.choice(["Yes, twice. It came back for a while and then did the same thing.",
                      "No, I haven't. Should I do that now?", "I did, but it didn't change anything."])),
        (b, f"Okay. There was an update released on {r.choice(WEEKDAYS)} that fixed a similar problem. "
            f"Can you check which version you have in the settings menu?"),
        (a, f"It says version {r.randint(1, 5)}.{r.randint(0, 20)}.{r.randint(0, 9)}."),
        (b, r.choice(["That's the old one. Let's install the update together.",
                      "That's the latest, so it might be the power adapter.",
                      "Hmm, that version should be fine. I'll open a repair ticket for you."])),
        (a, r.choice(FILLERS) + f" How long will it take?"),
        (b, f"Usually about {r.randint(5, 40)} minutes. Your ticket number is {r.randint(100000, 999999)}, "
            f"in case you need to call back."),
        (a, "Great, thank you so much for your help."),
    ]


def trip(r, a, b):
    city, other = r.sample(CITIES, 2)
    nights, price = r.randint(2, 10), r.randint(40, 300)
    month = r.choice(MONTHS)
    return [
        (a, f"So, are we still thinking about {city} in {month}?"),
        (b, f"I think so. I looked at flights yesterday and they were around {price * 2} euros return."),
        (a, f"That's not bad. How many nights were you thinking?"),
        (b, f"Maybe {nights}? We could spend the last {max(1, nights // 3)} in {other} if the train isn't too long."),
        (a, f"I checked, the train takes about {r.randint(2, 7)} hours. {r.choice(FILLERS)}"),
        (b, f"I found a small apartment near the old town for {price} a night. It has a kitchen, so we can cook."),
        (a, r.choice(["Perfect, I'd love that.", "Is it close to a metro station?", "Does it have good reviews?"])),
        (b, f"It's rated {r.randint(40, 49) / 10} out of 5, from about {r.randint(50, 900)} reviews."),
        (a, f"Then let's book it before the price goes up. I can pay the deposit on {r.choice(WEEKDAYS)}."),
        (b, "Deal. I'll send you the link tonight."),
    ]


def cooking(r, a, b):
    dish = r.choice(DISHES)
    return [
        (a, f"I want to make {dish} for the dinner on {r.choice(WEEKDAYS)}. Have you made it before?"),
        (b, f"Lots of times. How many people are coming?"),
        (a, f"{r.randint(3, 12)}, I think, if {r.choice(NAMES)} brings her brother."),
        (b, f"Then you'll need about {r.randint(2, 6)} times the recipe. Start with the onions, slowly, "
            f"for at least {r.randint(8, 20)} minutes."),
        (a, f"That long? {r.choice(FILLERS)}"),
        (b, "Yes, that's where the flavour comes from. Then add the rest and let it simmer."),
        (a, f"What temperature for the oven?"),
        (b, f"{r.choice([160, 170, 180, 190, 200, 220])} degrees, and check it after {r.randint(20, 50)} minutes."),
        (a, "And if it's too salty?"),
        (b, r.choice(["Add a potato and take it out later.", "A bit of lemon juice helps.",
                      "Just add more of everything else, honestly."])),
    ]


def study(r, a, b):
    subj = r.choice(SUBJECTS)
    ch, q = r.randint(2, 14), r.randint(3, 30)
    return [
        (a, f"Did you understand chapter {ch} of the {subj} book?"),
        (b, f"Mostly. The part about the second example confused me, though."),
        (a, f"Same. Question {q} on the problem set is basically that example again."),
        (b, f"I think the trick is to write it out step by step instead of jumping to the formula."),
        (a, f"{r.choice(FILLERS)} The exam is on {r.choice(WEEKDAYS)} the {r.randint(1, 28)}th, right?"),
        (b, f"Yes, at {r.randint(8, 16)}:{r.choice(['00', '15', '30', '45'])} in room {r.randint(100, 450)}."),
        (a, "Want to meet in the library the day before?"),
        (b, f"Sure, I'll bring my notes. {r.choice(NAMES)} said she might join us."),
    ]


def appointment(r, a, b):
    day, hour = r.choice(WEEKDAYS), r.randint(8, 17)
    return [
        (b, "Good morning, clinic reception. How can I help?"),
        (a, f"Hello, I'd like to book an appointment with Dr. {r.choice(NAMES)}, please."),
        (b, f"Of course. Is it a follow-up or a new issue?"),
        (a, r.choice(["A follow-up, from last month.", "A new issue, my knee has been hurting.",
                      "Just a routine check-up."])),
        (b, f"The first free slot is {day} at {hour}:{r.choice(['00', '20', '40'])}. Would that work?"),
        (a, f"{r.choice(FILLERS)} Could we do something later in the day?"),
        (b, f"There's {r.choice(WEEKDAYS)} at {r.randint(hour, 18)}:00, but only for {r.randint(10, 30)} minutes."),
        (a, "That's fine, I'll take it."),
        (b, f"Done. Please bring your insurance card and arrive {r.randint(5, 15)} minutes early."),
    ]


def small_talk(r, a, b):
    return [
        (a, f"Hey {b}! I haven't seen you since {r.choice(MONTHS)}. How have you been?"),
        (b, r.choice(["Busy, but good. We finally moved into the new flat.", "Tired, honestly. Work has been a lot.",
                      "Really good! I started running again."])),
        (a, f"{r.choice(FILLERS)} How far do you go now?"),
        (b, f"About {r.randint(3, 15)} kilometres, {r.randint(2, 5)} times a week."),
        (a, f"Impressive. I keep saying I'll start, and then it rains."),
        (b, f"Come with us on {r.choice(WEEKDAYS)}. We meet at the park at {r.randint(6, 9)}."),
        (a, "Maybe. If I'm awake."),
        (b, "Ha, I'll text you the night before."),
    ]


SCENES = [support, trip, cooking, study, appointment, small_talk]


def chat(limit, seed):
    r = random.Random(seed)
    out, size = [], 0
    while size < limit:
        a, b = r.sample(NAMES, 2)
        lines = r.choice(SCENES)(r, a, b)
        piece = "\n".join(f"{who}: {text}" for who, text in lines) + "\n\n"
        out.append(piece)
        size += len(piece.encode())
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--commit", default=DEFAULT_REV, help="git revision the code and docs corpora are read at")
    ap.add_argument("--bytes", type=int, default=200_000, help="approximate size of each corpus")
    ap.add_argument("--seed", type=int, default=19)
    a = ap.parse_args()
    try:
        git("rev-parse", "--verify", a.commit + "^{commit}")
    except subprocess.CalledProcessError:
        sys.exit(f"make_corpora: revision '{a.commit}' is not in this clone (fetch its history or pass --commit HEAD)")
    a.out.mkdir(parents=True, exist_ok=True)
    code = concat(a.commit, files_at(a.commit, ("src/", "tools/", "tests/"), (".cc", ".h")), a.bytes,
                  "// file: {path}", a.seed)
    docs = concat(a.commit, files_at(a.commit, ("README.md", "docs/"), (".md",)), a.bytes, "<!-- file: {path} -->",
                  a.seed)
    for name, text in [("code.txt", code), ("docs.txt", docs), ("chat.txt", chat(a.bytes, a.seed))]:
        (a.out / name).write_text(text)
        print(f"{a.out / name}: {len(text.encode())} bytes")


if __name__ == "__main__":
    main()
