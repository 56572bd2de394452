"""Source-quality tiers: a deterministic domain/authority table, no model involved.

CLEAR weighs evidence by source authority; a fixed table keeps that weighting reproducible and
auditable (the README prints `QUALITY_TABLE`). A URL's host is matched against the patterns; the
longest matching pattern wins, so `nlm.nih.gov` beats `gov`. A pattern matches the host itself or
any subdomain of it (`nih.gov` matches `rarediseases.info.nih.gov`).
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

from medpanel.retrieval.evidence import QualityTier


class QualityRule(NamedTuple):
    """One row of the authority table."""

    pattern: str
    """Host suffix (`nejm.org`) or bare top-level domain (`gov`)."""
    tier: QualityTier
    """Tier given to any host that matches."""
    kind: str
    """Why: the kind of authority, shown in the README table."""
    flag: str | None = None
    """Warning attached to the evidence (e.g. `preprint`)."""


QUALITY_TABLE: tuple[QualityRule, ...] = (
    # Government and intergovernmental health authorities.
    QualityRule("gov", "high", "government (US .gov)"),
    QualityRule("gov.uk", "high", "government (UK)"),
    QualityRule("gov.au", "high", "government (Australia)"),
    QualityRule("gc.ca", "high", "government (Canada)"),
    QualityRule("europa.eu", "high", "EU agency (EMA, ECDC)"),
    QualityRule("nih.gov", "high", "NIH (incl. NLM, MedlinePlus, GARD, GHR)"),
    QualityRule("ncbi.nlm.nih.gov", "high", "PubMed / PMC / NCBI Bookshelf"),
    QualityRule("cdc.gov", "high", "CDC"),
    QualityRule("fda.gov", "high", "FDA"),
    QualityRule("cancer.gov", "high", "National Cancer Institute"),
    QualityRule("who.int", "high", "World Health Organization"),
    QualityRule("nhs.uk", "high", "NHS (national health service)"),
    # Guideline bodies and systematic reviews.
    QualityRule("nice.org.uk", "high", "NICE guidelines"),
    QualityRule("uspreventiveservicestaskforce.org", "high", "USPSTF recommendations"),
    QualityRule("cochrane.org", "high", "Cochrane"),
    QualityRule("cochranelibrary.com", "high", "Cochrane Library"),
    QualityRule("europepmc.org", "high", "Europe PMC (literature database)"),
    # Major peer-reviewed journals and publishers of record.
    QualityRule("nejm.org", "high", "journal (NEJM)"),
    QualityRule("thelancet.com", "high", "journal (The Lancet)"),
    QualityRule("jamanetwork.com", "high", "journal (JAMA Network)"),
    QualityRule("bmj.com", "high", "journal (BMJ)"),
    QualityRule("nature.com", "high", "journal (Nature portfolio)"),
    QualityRule("acpjournals.org", "high", "journal (Annals of Internal Medicine)"),
    QualityRule("ahajournals.org", "high", "journal (AHA: Circulation, Stroke)"),
    QualityRule("atsjournals.org", "high", "journal (ATS)"),
    QualityRule("idsociety.org", "high", "guidelines (IDSA)"),
    # Academic medical centres, clinical references and encyclopaedias: reviewed but secondary.
    QualityRule("edu", "medium", "academic institution (.edu)"),
    QualityRule("ac.uk", "medium", "academic institution (UK)"),
    QualityRule("mayoclinic.org", "medium", "academic medical centre (Mayo Clinic)"),
    QualityRule("clevelandclinic.org", "medium", "academic medical centre (Cleveland Clinic)"),
    QualityRule("hopkinsmedicine.org", "medium", "academic medical centre (Johns Hopkins)"),
    QualityRule("medscape.com", "medium", "clinical reference (Medscape)"),
    QualityRule("uptodate.com", "medium", "clinical reference (UpToDate)"),
    QualityRule("merckmanuals.com", "medium", "clinical reference (Merck Manual)"),
    QualityRule("msdmanuals.com", "medium", "clinical reference (MSD Manual)"),
    QualityRule("aafp.org", "medium", "professional society (AAFP)"),
    QualityRule("heart.org", "medium", "patient information (American Heart Association)"),
    QualityRule("diabetes.org", "medium", "patient information (American Diabetes Association)"),
    QualityRule("wikipedia.org", "medium", "encyclopaedia (Wikipedia)"),
    QualityRule("patient.info", "medium", "patient information (clinician-written)"),
    QualityRule("drugs.com", "medium", "drug reference"),
    # Not peer reviewed yet: useful, but flagged.
    QualityRule("medrxiv.org", "low", "preprint server", "preprint"),
    QualityRule("biorxiv.org", "low", "preprint server", "preprint"),
    QualityRule("arxiv.org", "low", "preprint server", "preprint"),
    QualityRule("researchsquare.com", "low", "preprint server", "preprint"),
    QualityRule("ssrn.com", "low", "preprint server", "preprint"),
)
"""The authority table; any host that matches no row is `low`."""

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


def assess_source(url: str | None, title: str | None = None) -> tuple[QualityTier, list[str]]:
    """Tier and warning flags for a source; deterministic, offline."""
    rule = match_rule(url)
    tier: QualityTier = rule.tier if rule else "low"
    flags: list[str] = []
    if rule and rule.flag:
        flags.append(rule.flag)
    if not url:
        flags.append("no-url")
    lowered = (title or "").lower()
    if any(marker in lowered for marker in _RETRACTED_MARKERS):
        tier = "low"
        flags.append("retracted")
    return tier, flags


def assess_quality(url: str | None, title: str | None = None) -> QualityTier:
    """`high`, `medium` or `low` for a URL (and title), from `QUALITY_TABLE`."""
    return assess_source(url, title)[0]
