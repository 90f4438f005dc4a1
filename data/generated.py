"""Prompts drawn from the domain corpora, and the resumable JSONL store for the target's answers to them
(sequence-level distillation: the draft learns what the target actually says).

The model call lives in scripts/generate_data.py; this module only builds prompts and reads/writes records.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Iterator

from data.atomic import temp_file
from data.checks import UsageError, torn_tail
from data.corpus_prompts import code_member_prompts, code_prompts, medical_prompts
from data.prompts import reserved_prompts

log = logging.getLogger("draftsmith.generated")


# Everyday topics for general chat prompts (training). The evaluation prompts (data/prompts.py) use other topics
# and other templates.
TOPICS = """photosynthesis; black holes; the water cycle; volcanoes; earthquakes; the immune system; vaccines;
sleep; meditation; running a marathon; learning a language; public speaking; time management; budgeting;
saving for retirement; inflation; supply and demand; the stock market; cryptocurrency; renewable energy;
solar panels; electric cars; recycling; composting; climate change; coral reefs; rainforests; honeybees;
migratory birds; dinosaurs; the Roman Empire; the printing press; the industrial revolution; the moon landing;
the internet; email etiquette; password security; cloud computing; machine learning; neural networks;
spreadsheets; databases; version control; open source software; video games; chess; the olympics; football;
basketball; yoga; healthy breakfast ideas; baking bread; making coffee; fermentation; vegetarian cooking;
growing tomatoes; houseplants; adopting a dog; training a cat; aquariums; road trips; packing for travel;
visiting Japan; camping; hiking safety; first aid basics; hydration; vitamins; posture at a desk;
job interviews; writing a resume; negotiating salary; remote work; team meetings; giving feedback;
friendship; parenting toddlers; teaching children to read; studying for exams; note taking; speed reading;
classical music; jazz; learning guitar; painting with watercolors; photography; poetry; writing a novel;
movies; museums; architecture; bridges; skyscrapers; trains; airplanes; how rockets work; satellites;
GPS; microwaves; refrigerators; batteries; electricity at home; plumbing; home insulation; gardening tools;
the human heart; the brain; memory; habits; motivation; stress; happiness; kindness; volunteering;
democracy; taxes; the history of money; maps; weather forecasts; rainbows; tides; the seasons""".split(";")
TEMPLATES = ["Explain {} to a beginner.", "What are three interesting facts about {}?", "Give me some tips about {}.",
             "Write a short paragraph about {}.", "What are the pros and cons of {}?", "How does {} work?",
             "What should everyone know about {}?", "Describe the history of {} briefly."]


def grid_prompts(templates: list[str], topics: list[str]) -> Iterator[str]:
    """Every template filled with every topic (template-major, the topics' whitespace collapsed)."""
    for template in templates:
        for topic in topics:
            yield template.format(" ".join(topic.split()))


def general_prompts() -> Iterator[str]:
    return grid_prompts(TEMPLATES, TOPICS)


# More everyday chat prompts of other kinds (prompts_from=everyday): topics and question forms that neither `general`
# nor the evaluation prompts use, so that a draft trained on both sets sees more kinds of request than one template
# grid. Its answers are general-domain text: the general evaluation prompts measure a draft trained on them.
EVERYDAY_TOPICS = """elephants; dolphins; butterflies; spiders; sharks; frogs; horses; parrots; bats; jellyfish; bamboo;
cacti; sunflowers; oak trees; apples; rice; olive oil; honey; ice cream; soup; street food; table manners;
birthdays; weddings; gift giving; moving house; renting an apartment; buying a used car; car maintenance;
cycling to work; swimming; tennis; golf; karate; dancing; singing; stand-up comedy; cartoons; comic books;
fairy tales; mythology; ancient Egypt; the Aztecs; the Middle Ages; the French Revolution; the Cold War;
the space station; Mars; Jupiter; the sun; asteroids; hurricanes; tornadoes; snow; fog; thunderstorms; soil; sand;
gold; diamonds; steel; plastic; nuclear power; hydrogen; drinking water; sewage systems; hospitals; dentists;
pharmacies; walking; stretching; laughter; loneliness; curiosity; patience; honesty; creativity; boredom;
procrastination; decision making; critical thinking; debating; leadership; small businesses; advertising;
customer service; online shopping; smartphones; social media; emojis; robots; 3D printing; virtual reality;
self-driving cars; drones; web browsers; keyboards; wifi; spam; backups; encryption; programming languages;
calculators; the number zero; prime numbers; probability; statistics; geometry; fractions; tunnels; harbors;
airports; post offices; banks; insurance; credit cards; charities; fashion; shoes; soap""".split(";")
EVERYDAY_TEMPLATES = ["Why does {} matter?", "What are common misconceptions about {}?",
                      "Explain {} using an analogy.", "How would you get started with {}? Give me the steps.",
                      "Write a short story that involves {}.", "List five key terms related to {} and define each.",
                      "How has {} changed over the last hundred years?", "What are the biggest challenges around {} "
                      "today?", "What questions do people often ask about {}, and what are the answers?",
                      "Write a friendly note to a friend about {}.", "Compare {} with something similar.",
                      "Teach me one useful thing about {}."]


def everyday_prompts() -> Iterator[str]:
    return grid_prompts(EVERYDAY_TEMPLATES, EVERYDAY_TOPICS)


PROMPT_SOURCES = {"general": general_prompts, "everyday": everyday_prompts, "medical": medical_prompts,
                  "code": code_prompts}


# Where a domain's set above runs out, more prompts from the same sources (issue #43: stores of 2,000 answers; the
# code set holds 677, the general one 976): drawn only after every prompt of the set above, each tier shuffled on its
# own, so a domain's first prompts, and the stores built from them, stay what they were. General goes on with the
# everyday set: other topics and question forms, none an evaluation topic (data/prompts.py EVAL_TOPICS).
MORE_PROMPTS = {"code": [code_member_prompts], "general": [everyday_prompts]}


def domain_prompts(domain: str, n: int, seed: int = 0) -> list[str]:
    """n distinct training prompts for `domain`, shuffled deterministically, never an evaluation prompt."""
    if domain not in PROMPT_SOURCES:
        raise UsageError(f"Unknown domain '{domain}' for generated data. Choose one of: {', '.join(PROMPT_SOURCES)}.")
    out: list[str] = []
    for tier in candidate_tiers(domain):
        prompts = list(tier)
        random.Random(seed).shuffle(prompts)
        out += prompts
        if len(out) >= n:
            break
    return out[:n]


@functools.lru_cache(maxsize=None)
def candidate_tiers(domain: str) -> tuple[tuple[str, ...], ...]:
    """Every distinct training prompt of `domain` in corpus order, per tier (the set, then MORE_PROMPTS), read once
    per process (the medical corpora take seconds to parse). Built from the training side of the corpora; any
    evaluation prompt is dropped as well."""
    reserved, seen, tiers = reserved_prompts(), set(), []
    for source in (PROMPT_SOURCES[domain], *MORE_PROMPTS.get(domain, [])):
        tier = tuple(p for p in dict.fromkeys(source()) if p not in reserved and p not in seen)
        seen.update(tier)
        tiers.append(tier)
    return tuple(tiers)


def done_prompts(path: Path) -> set[str]:
    """Prompts already answered in a JSONL store (a torn last line from a crash is ignored)."""
    done = set()
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["messages"][0]["content"])
            except (json.JSONDecodeError, KeyError, IndexError):
                continue
    return done


def settings_file(store: Path) -> Path:
    """The sidecar that records how a store's answers were generated: <store>.settings.json."""
    return store.with_name(store.name + ".settings.json")


def check_store_settings(store: Path, settings: dict, adding: bool) -> None:
    """One store holds answers generated one way. If `settings` (temperature, top_p, max_new_tokens) differ from
    those the store was written with: adding answers fails (greedy and sampled answers would mix unnoticed), and
    reading a complete store warns that the settings do not apply to it. A store without a sidecar (new, or
    written before sidecars existed) takes these settings when answers are added."""
    path = settings_file(store)
    if not path.is_file():
        if adding:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(settings, indent=1) + "\n")
        return
    written = json.loads(path.read_text())
    changed = {k: (written.get(k), v) for k, v in settings.items() if written.get(k) != v}
    if not changed:
        return
    detail = ", ".join(f"{k}={old} (asked: {new})" for k, (old, new) in changed.items())
    if not adding:
        log.warning("%s was generated with %s: it answers every prompt asked, so it is used as it is.", store, detail)
        return
    suffix = f"-t{settings['temperature']:g}" if "temperature" in changed else "-2"
    raise UsageError(f"{store} holds answers generated with {detail}. Fix: point data.store or data.sampled_store "
                     f"(out= for scripts/generate_data.py) at another file, e.g. "
                     f"{store.with_name(store.stem + suffix + '.jsonl')}, or delete the store to regenerate it.")


REPO_STORES = Path(__file__).resolve().parent / "stores"  # answer stores kept in the repository (stores/README.md)


def seed_from_repo(store: Path, target_slug: str, domain: str, settings: dict, seed: int,
                   stores: Path = REPO_STORES) -> bool:
    """A store that does not exist yet starts as a copy of the repository's store for the same target and domain
    (data/stores/<target slug>/<domain>.jsonl), when that one was written the same way (its settings sidecar) from the
    same prompt seed: its answers are then the ones this run would write, for the first prompts of the same list, so
    only the prompts it lacks are answered. Returns whether it copied."""
    store, kept = Path(store), Path(stores) / target_slug / f"{domain}.jsonl"
    if store.exists() or seed != 0 or not kept.is_file() or not settings_file(kept).is_file():
        return False
    if store.resolve() == kept.resolve() or json.loads(settings_file(kept).read_text()) != settings:
        return False
    for source, dest in ((settings_file(kept), settings_file(store)), (kept, store)):  # the answers last: their
        fd, tmp = temp_file(dest.parent, dest.name)                                  # presence means complete
        os.close(fd)
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    log.info("%s starts from the repository's %d answers in %s", store, len(done_prompts(store)), kept)
    return True


def drop_torn_tail(path: Path) -> int:
    """Cut a store's last line when a kill left it half-written (answers after it would join it into one unreadable
    line); says so. Returns the bytes dropped (0: the store was whole)."""
    cut = torn_tail(path)
    if cut:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(size - cut)
        log.warning("%s: dropped its last line (%d bytes), cut short by an interrupted run; its prompt is answered "
                    "again.", path, cut)
    return cut


def append_records(path: Path, pairs: list[tuple[str, str]]) -> None:
    """Append (prompt, answer) chat records and flush to disk: progress survives a kill."""
    path.parent.mkdir(parents=True, exist_ok=True)
    before = path.stat().st_size if path.is_file() else 0
    try:
        with open(path, "a", encoding="utf-8") as f:
            for prompt, answer in pairs:
                f.write(json.dumps({"messages": [{"role": "user", "content": prompt},
                                                 {"role": "assistant", "content": answer}]}) + "\n")
            f.flush()
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        with open(path, "r+b") as f:  # the batch goes whole or not at all: no half line stays behind
            f.truncate(before)
        raise UsageError(f"the disk is full while writing {path}: this batch's answers were dropped, the "
                         f"{len(done_prompts(path))} before it are kept. Fix: free space, then rerun the same "
                         "command (it resumes).") from None
