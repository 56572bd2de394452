"""Source-quality tiers from a deterministic domain/authority table: CLEAR's prior and fallback.

CLEAR's paper labels every dynamic document high/medium/low in one backbone call (appendix A.2;
`medpanel.methods.clear.quality` does that). This table is what that call starts from (each
document's prior) and what stands when the call's reply is invalid; the retrieval layer also uses
it wherever no model is involved (the snapshot web's hits, `medpanel corpus search`).

The entries follow the table in CLEAR's released code (`source_quality.py`, as described in
../shared/reference/clear_and_medical_rag.md section 1.4), re-implemented here:

- hosts the authors name get their tier and its score (high 0.90, medium 0.70, low 0.25);
- any other host falls back by its ending: `.gov` 0.75 (medium), `.edu` 0.65 (medium), `.org`
  0.50 (medium), anything else 0.40 (low); no URL at all is 0.25 (low);
- the title and text then move the score: +0.05 for "guideline"/"recommendation", +0.05 for
  "meta-analysis"/"systematic review", -0.10 for "case report";
- the tier is read off the score: >= 0.80 high, >= 0.50 medium, else low.

medpanel adds rows of its own (`origin="medpanel"`) only for hosts the authors' table does not
name, each of the same kind as an authors' row (a national health agency like nih.gov, a
journal like nejm.org, a preprint server), and one rule: a title saying "retracted" forces low.
docs/methods/knowledge.md prints the whole table with each row's origin. A host matches a row when it is the
row's pattern or a subdomain of it; the longest matching pattern wins.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, NamedTuple
from urllib.parse import urlsplit

from medpanel.retrieval.evidence import QualityTier

Origin = Literal["clear", "medpanel"]

TIER_SCORE: dict[QualityTier, float] = {"high": 0.90, "medium": 0.70, "low": 0.25}
"""The score a named host starts from, by its row's tier (the authors' values)."""
HIGH_AT, MEDIUM_AT = 0.80, 0.50
"""Score thresholds of the tiers (the authors' values)."""


class QualityRule(NamedTuple):
    """One row of the authority table."""

    pattern: str
    """Host suffix (`nejm.org`)."""
    tier: QualityTier
    """Tier of a host that matches (its score is `TIER_SCORE[tier]`)."""
    kind: str
    """Why: the kind of authority, shown in the docs table (docs/methods/knowledge.md)."""
    origin: Origin = "clear"
    """`clear`: the authors' table; `medpanel`: added here for a host the authors do not name."""
    flag: str | None = None
    """Warning attached to the evidence (e.g. `preprint`)."""


def _rows(tier: QualityTier, origin: Origin, *rows: tuple[str, str]) -> tuple[QualityRule, ...]:
    return tuple(QualityRule(pattern, tier, kind, origin) for pattern, kind in rows)


QUALITY_TABLE: tuple[QualityRule, ...] = (
    # The authors' high-authority hosts.
    *_rows("high", "clear",
           ("cdc.gov", "public health authority (CDC)"),
           ("nih.gov", "government medical authority (NIH, incl. GARD, NIDDK, NHLBI, NINDS)"),
           ("ncbi.nlm.nih.gov", "NIH/NCBI medical reference"),
           ("pubmed.ncbi.nlm.nih.gov", "PubMed"),
           ("pmc.ncbi.nlm.nih.gov", "PubMed Central"),
           ("nccn.org", "clinical guideline organisation (NCCN)"),
           ("nice.org.uk", "clinical guideline organisation (NICE)"),
           ("who.int", "public health authority (WHO)"),
           ("acog.org", "specialty society (ACOG)"),
           ("aap.org", "specialty society (AAP)"),
           ("heart.org", "specialty society (American Heart Association)"),
           ("idsociety.org", "specialty society (IDSA)"),
           ("diabetesjournals.org", "specialty journal and guidelines (ADA)"),
           ("cochrane.org", "systematic reviews (Cochrane)"),
           ("nejm.org", "major medical journal (NEJM)"),
           ("jamanetwork.com", "major medical journal (JAMA Network)"),
           ("thelancet.com", "major medical journal (The Lancet)"),
           ("bmj.com", "major medical journal (BMJ)"),
           ("uptodate.com", "clinician reference (UpToDate)"),
           ("merckmanuals.com", "clinician reference (Merck Manuals)"),
           ("msdmanuals.com", "clinician reference (MSD Manuals)"),
           ("mayoclinic.org", "academic medical centre reference (Mayo Clinic)")),
    # The authors' medium-authority hosts.
    *_rows("medium", "clear",
           ("aafp.org", "professional society and reference (AAFP)"),
           ("clevelandclinic.org", "academic medical centre reference (Cleveland Clinic)"),
           ("mdcalc.com", "clinical decision support (MDCalc)"),
           ("emedicine.medscape.com", "clinician reference (eMedicine)"),
           ("medscape.com", "clinician reference (Medscape)"),
           ("radiopaedia.org", "specialty educational reference (Radiopaedia)"),
           ("pathologyoutlines.com", "specialty educational reference (PathologyOutlines)"),
           ("statpearls.com", "medical education reference (StatPearls)"),
           ("link.springer.com", "publisher-hosted peer-reviewed literature (Springer)"),
           ("sciencedirect.com", "publisher-hosted peer-reviewed literature (ScienceDirect)"),
           ("academic.oup.com", "publisher-hosted peer-reviewed literature (OUP)"),
           ("onlinelibrary.wiley.com", "publisher-hosted peer-reviewed literature (Wiley)"),
           ("tandfonline.com", "publisher-hosted peer-reviewed literature (Taylor & Francis)"),
           ("nature.com", "publisher-hosted peer-reviewed literature (Nature)"),
           ("frontiersin.org", "publisher-hosted peer-reviewed literature (Frontiers)")),
    # The authors' low-authority hosts.
    *_rows("low", "clear",
           ("droracle.ai", "automated medical content"),
           ("consensus.app", "secondary search summary"),
           ("wikipedia.org", "crowd-edited reference (Wikipedia)"),
           ("medium.com", "blog platform"),
           ("wordpress.com", "blog platform"),
           ("blogspot.com", "blog platform")),
    # medpanel's additions: national health agencies and journals of the same kind as the authors' rows.
    *_rows("high", "medpanel",
           ("cancer.gov", "National Cancer Institute (an NIH institute on its own domain)"),
           ("medlineplus.gov", "MedlinePlus (NLM, on its own domain)"),
           ("fda.gov", "FDA"),
           ("ema.europa.eu", "European Medicines Agency"),
           ("ecdc.europa.eu", "European Centre for Disease Prevention and Control"),
           ("nhs.uk", "NHS"),
           ("uspreventiveservicestaskforce.org", "USPSTF recommendations"),
           ("cochranelibrary.com", "Cochrane Library"),
           ("europepmc.org", "Europe PMC (literature database)"),
           ("acpjournals.org", "major medical journal (Annals of Internal Medicine)"),
           ("ahajournals.org", "specialty journal (AHA: Circulation, Stroke)"),
           ("atsjournals.org", "specialty journal (ATS)")),
    *_rows("medium", "medpanel",
           ("ac.uk", "academic institution (UK), like .edu"),
           ("gov.uk", "government (UK), like .gov"),
           ("gov.au", "government (Australia), like .gov"),
           ("gc.ca", "government (Canada), like .gov"),
           ("europa.eu", "EU institution, like .gov")),
    *(QualityRule(pattern, "low", "preprint server", "medpanel", "preprint")
      for pattern in ("medrxiv.org", "biorxiv.org", "arxiv.org", "researchsquare.com", "ssrn.com")),
)
"""The named hosts; any other host falls back by its ending (`FALLBACKS`)."""

FALLBACKS: tuple[tuple[str, float, str], ...] = (
    ("gov", 0.75, "government domain"),
    ("edu", 0.65, "academic domain"),
    ("org", 0.50, "organisation domain without a named medical authority"),
)
"""(top-level domain, score, why) for hosts no row names (the authors' values); others score 0.40."""
OTHER_SCORE, NO_URL_SCORE = 0.40, 0.25

CONTENT_ADJUSTMENTS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("guideline", "recommendation"), 0.05),
    (("meta-analysis", "systematic review"), 0.05),
    (("case report",), -0.10),
)
"""Words in a document's title or text that move its score (the authors' values)."""

# A retraction notice outranks the host: a retracted NEJM paper is still retracted.
_RETRACTED_MARKERS = ("retracted", "retraction")


def _host(url: str) -> str:
    # urlsplit needs a scheme to find the host; bare "nejm.org/x" is common in model output.
    parts = urlsplit(url if "://" in url else f"//{url}")
    host = (parts.hostname or "").lower().rstrip(".")
    return host.removeprefix("www.")


def _matches(host: str, pattern: str) -> bool:
    return host == pattern or host.endswith("." + pattern)


def match_rule(url: str | None) -> QualityRule | None:
    """The most specific table row matching the URL's host, or None."""
    if not url:
        return None
    host = _host(url)
    if not host:
        return None
    hits = [rule for rule in QUALITY_TABLE if _matches(host, rule.pattern)]
    return max(hits, key=lambda r: len(r.pattern)) if hits else None


def host_score(url: str | None) -> tuple[float, list[str]]:
    """The score from the host alone (a named row, else the fallback), and the row's flags."""
    score, flags = _host_score(url or "")
    return score, list(flags)


@lru_cache(maxsize=65536)  # retrieval scores every hit; a corpus has few distinct URLs per query
def _host_score(url: str) -> tuple[float, tuple[str, ...]]:
    if not url or not _host(url):
        return NO_URL_SCORE, ("no-url",)
    rule = match_rule(url)
    if rule is not None:
        return TIER_SCORE[rule.tier], (rule.flag,) if rule.flag else ()
    host = _host(url)
    for tld, score, _why in FALLBACKS:
        if _matches(host, tld):
            return score, ()
    return OTHER_SCORE, ()


def tier_of(score: float) -> QualityTier:
    # Rounded first: 0.75 + 0.05 must reach 0.80 exactly, as in the authors' code.
    score = round(score, 2)
    return "high" if score >= HIGH_AT else "medium" if score >= MEDIUM_AT else "low"


def content_adjustment(title: str | None, text: str | None = None) -> float:
    lowered = f"{title or ''} {text or ''}".lower()
    return sum(step for words, step in CONTENT_ADJUSTMENTS if any(w in lowered for w in words))


def assess_source(url: str | None, title: str | None = None, text: str | None = None) -> tuple[QualityTier,
                                                                                             list[str]]:
    """Tier and warning flags for a source (URL, title, and the document's text where known)."""
    score, flags = host_score(url)
    score = min(1.0, max(0.0, score + content_adjustment(title, text)))
    tier = tier_of(score)
    if any(marker in (title or "").lower() for marker in _RETRACTED_MARKERS):
        tier = "low"
        flags = [*flags, "retracted"]
    return tier, flags


def assess_quality(url: str | None, title: str | None = None, text: str | None = None) -> QualityTier:
    """`high`, `medium` or `low` for a URL (and title and text), from `QUALITY_TABLE`."""
    return assess_source(url, title, text)[0]
