"""The knowledge channel's report table (generalist, panel and calibrated runs that retrieve)."""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.tables import OVERALL, ResultRow, Table, pct
from medpanel.methods.panel.channels.knowledge_settings import KnowledgeFacts


class _Facts(KnowledgeFacts):
    recruit_names: list[str] | None = None
    """The panel's: which recipients were recruits (set on every panel summary)."""


def knowledge_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    """The knowledge channel's four steps, counted apart: gate fired (a query was written), passages
    retrieved, brief delivered to at least one agent, and who received it."""
    datasets = sorted({r.dataset for r in rows})
    facts = {id(r): _Facts.view(r.summary) for r in rows}
    out = []
    for cond in conditions:
        mine = [r for r in rows if r.condition == cond]
        if not any(facts[id(r)].used_channel for r in mine):
            continue
        panel = any(facts[id(r)].recruit_names is not None for r in mine)
        for ds in [*datasets, OVERALL]:
            sel = [r for r in mine if ds == OVERALL or r.dataset == ds]
            if not sel:
                continue
            ok = [facts[id(r)] for r in sel if not r.error and facts[id(r)].used_channel]
            n = len(ok)
            fired = sum(1 for f in ok if (f.queries_written or 0) > 0)
            found = sum(1 for f in ok if (f.retrievals or 0) > 0)
            delivered = sum(1 for f in ok if (f.briefs_delivered or 0) > 0)
            recipients = [f.brief_received_by or [] for f in ok]
            recruit_hits = sum(len(set(got) & set(f.recruit_names or []))
                               for got, f in zip(recipients, ok, strict=True))
            recruits: float | str = (round(recruit_hits / n, 2) if n else 0.0) if panel else "-"
            out.append([cond, ds, n, len(sel) - n, fired, round(pct(fired, n), 1), found, round(pct(found, n), 1),
                        delivered, round(pct(delivered, n), 1),
                        round(sum(f.queries_written or 0 for f in ok) / n, 2) if n else 0.0,
                        round(sum(f.passages_retrieved or 0 for f in ok) / n, 2) if n else 0.0,
                        round(sum(len(x) for x in recipients) / n, 2) if n else 0.0, recruits])
    if not out:
        return None
    return Table("Knowledge recruitment", ["condition", "dataset", "n", "errors", "gate_fired_q", "gate_fired_%",
                                           "retrieved_q", "retrieved_%", "brief_delivered_q", "brief_delivered_%",
                                           "queries_per_q", "passages_per_q", "recipients_per_q",
                                           "recruit_recipients_per_q"], out,
                 note="Per question, counted apart: gate fired = a query was written (upfront: the question text, "
                      "no gate); retrieved = a search returned passages; brief delivered = a valid brief reached at "
                      "least one agent; recipients = distinct agents who received a brief (recruits among them: "
                      "panel only; 0 under -ind). Rates over the n questions answered without error.")
