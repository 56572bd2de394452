"""The words of the answer screen (`leak_screen.py`): which words of an option's text are its own, and
the phrasings that put an option in the place of a verdict. Regular-expression pieces are written
for case-insensitive matching; each names what it catches.
"""

from __future__ import annotations

FUNCTION = frozenset("a an the of to in on for with and or by at from as into per vs versus than without plus "
                     "s".split())
"""Words that never make an option's text distinctive ("the", "of"; "s" is a possessive's tail)."""

GENERIC = frozenset("""
disease diseases syndrome disorder deficiency infection injury lesion artery arteries vein nerve muscle gland
acute chronic primary secondary oral intravenous iv im subcutaneous topical inhaled dose high low left right
upper lower anterior posterior superior inferior medial lateral type therapy treatment test testing level
levels serum blood cell cells count scan study drug drugs agent immediate urgent emergency repeat follow up
management administration inhibition increased decreased normal abnormal patient surgery procedure
""".split())
"""Words many options carry ("disease", "artery", "oral"): never a distinctive part on their own."""

UNIGRAM_STOP = frozenset("""
main major minor simple early late common general total partial small large long short old new first second
third single double full mild severe moderate true false only best most more less none other same both each
within case cases family plan care risk time step next start stop give take make keep watch wait
""".split())
"""Common English words: part of a distinctive run ("left main") but never one alone."""

HEADS = frozenset("""
disease syndrome deficiency infection infarct infarction occlusion lesion injury palsy territory toxicity
therapy treatment regimen course pathway mechanism inhibition overdose poisoning reaction variant
""".split())
"""A head noun after an option's words belongs to the mention: "a right coronary artery occlusion"."""

NAME_WORDS = frozenset("""
vitamin hepatitis type class grade stage factor phase lead leads zone protein complex fraction wave waves
schedule plan cluster section appendix table figure level category criterion haemophilia hemophilia influenza
strep streptococcus ig immunoglobulin blood group
""".split())
"""A capital after these is part of a name, not an option's letter: "vitamin C", "hepatitis B"."""

LETTER_FOLLOWERS = frozenset("is was would should must fits fit seems looks remains matches and or vs versus "
                             "over best better it then explains accounts wins still".split())
"""After "A", these make the capital a letter ("A is correct") and not the article."""
PRONOUN_FOLLOWERS = LETTER_FOLLOWERS - {"would", "should", "must", "still", "then"}
"""After "I", fewer: "I would ask", "I should add" are the pronoun."""

ADV = (r"(?:clearly|obviously|definitely|certainly|surely|probably|likely|most\s+likely|almost\s+certainly|simply"
       r"|just|actually|really|still|undoubtedly|plainly|evidently|then|therefore|thus|so)")

PRE = (r"(?:(?:a|an|the|her|his|him|them|their|its|this|option|choice|answer|letter|blood\s+group|blood\s+type"
       r"|group|type|with|on|to|for|of|" + ADV[3:-1] +
       r"|classic|classical|typical|textbook|oral|intravenous|iv|im|topical|inhaled|empiric(?:al)?|immediate"
       r"|urgent|emergent|prompt|early|high[-\s]dose|low[-\s]dose|short\s+course\s+of|course\s+of|trial\s+of"
       r"|dose\s+of|treatment\s+with|therapy\s+with|an?\s+[a-z]+\s+(?:such\s+as|like|namely)|such\s+as|namely"
       r")[\s,(]+)*")
"""What may stand between a verdict's words and the option: "is an SSRI such as", "start her on"."""

COPULA = (r"\b(?:is|are|was|were|be|remains|remain|becomes|equals|looks\s+like|sounds\s+like)\b|['’]s\b"
          r"|(?<![<>!=])=")
"""The stem's ask answered: "the most likely diagnosis is", "it's", "NNT = ..."."""

CUE = (r"\b(?:(?:the\s+)?(?:answer|(?:correct|best|right)\s+(?:option|choice|answer))\s*(?:is|should\s+be"
       r"|must\s+be|would\s+be|=|:)|choose|select|pick|go\s+with|opt\s+for|switch\s+to"
       r"|change\s+(?:the\s+|your\s+)?answer\s+to)")
"""An answer cue, even in a question: "the answer is", "choose", "switch to"."""

ACT = (r"start|begin|initiate|commence|give|administer|prescribe|push|use|try|add|order|obtain|get|perform|do"
       r"|arrange|book|schedule|refer|proceed\s+(?:with|to)|go\s+(?:with|for|straight\s+to|to)|opt\s+for"
       r"|choose|select|pick|switch\s+(?:over\s+)?to|change\s+to|move\s+to|escalate\s+to|stick\s+with"
       r"|stay\s+with|settle\s+on|transfuse|treat|offer|recommend|prefer|favou?r")
"""An order: "start", "give", "switch to", "book her for"."""

MODAL = (r"should|must|ought\s+to|needs?\s+to|has\s+to|have\s+to|had\s+better|will\s+need\s+to"
         r"|would\s+benefit\s+from")

SKIP_VERB = (r"consider|considered|exclude|excluded|discussed|address|explain|explained|weigh|weighed|justify"
             r"|compare|review|revisit|reconsider|question|rule|ruled|examine|check|test|evaluate|assess|mention"
             r"|doubt|defend|look|ask|think|know|see|say|note|notice|be\s+aware|worry|expect")
"""After "should", verbs that ask for reasoning about an option rather than choosing it."""

INFER = (r"\b(?:points?|pointing)\s+(?:[a-z]+\s+)?(?:to|towards?)|\b(?:favou?rs?|indicates?|suggests?"
         r"|supports?|confirms?|implies|implicates?|mandates?|requires?|warrants?|calls\s+for|argues\s+for"
         r"|clinches|establishes|makes\s+the\s+diagnosis\s+of)|\b(?:consistent|compatible|in\s+keeping)\s+with"
         r"|\b(?:diagnostic|typical|classic|characteristic|pathognomonic|hallmark)\s+(?:of|for)"
         r"|\b(?:acts?|works?|kills?)\s+(?:[a-z]+\s+)?(?:by|through|via)(?:\s+(?:inhibiting|blocking|disrupting"
         r"|targeting|binding))?")
"""What a finding proves: "points to", "most consistent with", "acts by inhibiting"."""

SUBJECT_START = (r"(?:(?:so|thus|hence|here|then|clearly|obviously|overall|ultimately|honestly|really|i\s+think"
                 r"|i\s+believe|i\s+agree|we\s+agree|agreed|in\s+my\s+view|to\s+me|in\s+short|i['’]m\s+sure"
                 r"|i\s+am\s+sure|given\s+[^,]*)\s*(?:that\s+)?,?\s*)*")
"""What may open a clause whose subject is the option: "I think X is ...", "Given the palms, X is ..."."""

_VERDICT_END = (r"(?=\s*(?:$|[.,;:!?)\]—–]|-\s|\b(?:because|since|given|here|now|for|with|in|of|than|over"
                r"|overall|answer|option|choice|diagnosis|explanation|and|as|at|by)\b))")
VERDICT_AFTER = (
    r"\s*,?\s*(?:(?:is|are|was|['’]s|would\s+be|should\s+be|must\s+be|has\s+to\s+be|will\s+be|can\s+only\s+be"
    r"|seems|seem|looks|appears|remains|becomes|stands\s+out\s+as)\s+(?:" + ADV + r"\s+)*"
    r"(?:(?:the\s+|a\s+|an\s+)?(?:(?:most|more|far\s+more|much\s+more|by\s+far\s+the|clearly\s+the)\s+)?"
    r"(?:likely|likeliest|probable|plausible|appropriate|suitable|consistent|correct|right|best|better"
    r"|preferable|preferred|favou?red|indicated|warranted|strongest|leading|obvious|clear|safest|optimal|ideal"
    r"|definitive|first[-\s]line|proper|only\s+(?:sensible|reasonable|correct|right))(?:\s+[a-z]+){0,2}"
    r"|the\s+(?:answer|culprit|winner|diagnosis|cause|choice|option|one|way\s+to\s+go|[a-z]+\s+of\s+choice"
    r"|next\s+step|first\s+step|mechanism|organism|vessel|nerve|explanation|fit|key)"
    r"|what\s+(?:she|he|they|the\s+patient|this\s+patient)\s+needs|it)" + _VERDICT_END +
    r"|(?:best|better|fully|alone|neatly|clearly|most\s+likely)?\s*(?:explains|accounts\s+for|fits|matches"
    r"|unifies|ties\s+together|covers)\s+(?:all|everything|every|the\s+whole|the\s+entire|both|it\s+all|best"
    r"|better|most|the\s+(?:picture|findings|presentation|history))"
    r"|(?:best|better)\s+(?:explains|fits|matches|accounts)"
    r"|(?:should|must|needs\s+to|has\s+to|ought\s+to)\s+be\s+(?:[a-z]+ly\s+)?(?:started|given|prescribed"
    r"|administered|initiated|ordered|performed|done|chosen|selected|used|preferred|favou?red))")
"""A verdict after the option: "X is the most likely diagnosis", "X fits best", "X should be started"."""

END = (r"(?=\s*(?:$|[.,;:!?)\]—–]|-\s|\b(?:because|since|given|here|now|today|immediately|instead|rather|over"
       r"|and|for|with|in|which|who|as\s+(?:the|first|initial)|based|due|at\s+once|right\s+away|then|first"
       r"|alone|too|again|overall|all\s+along|after\s+all|is\s+(?:the|what|correct|right|best|most|likely"
       r"|clearly|definitely|obviously)|would|should|must|fits|explains|it\s+is|before|not)\b))")
"""After an option named by a verdict's words: the clause ends, or a reason or a time follows."""

FILLER_BEFORE = (r"so|thus|hence|therefore|then|clearly|obviously|definitely|certainly|surely|probably|likely"
                 r"|most\s+likely|almost\s+certainly|undoubtedly|plainly|simply|just|overall|ultimately|honestly"
                 r"|really|in\s+short|in\s+conclusion|bottom\s+line|final\s+answer|my\s+answer|answer|my\s+vote"
                 r"|my\s+pick|i\s+think|i\s+believe|i['’]d\s+say|i\s+would\s+say|i\s+say|it['’]s|it\s+is"
                 r"|this\s+is|that['’]s|that\s+is|this\s+looks\s+like|sounds\s+like|looks\s+like|go|verdict"
                 r"|diagnosis|dx|rx|treatment|management|yes|definitely|blood\s+group|blood\s+type|group")
"""Words that may surround a bare option: "Clearly C.", "So it's Graves disease.", "Blood group B."."""

FILLER_AFTER = (r"clearly|obviously|definitely|certainly|surely|probably|of\s+course|no\s+question|no\s+doubt"
                r"|for\s+sure|it\s+is|all\s+the\s+way|then|again|here|now|immediately|today|at\s+once"
                r"|right\s+away|first|instead|overall|please|too")

REASON = r"given|because|since|as|due\s+to|considering|in\s+view\s+of"
"""A bare option with its reason: "Bupropion, given the sexual side effects."."""

NEGATION = (r"\b(?:not|never|no|nor|neither|nobody|none|without|against|except|unlikely|less\s+likely|rather\s+than"
            r"|instead\s+of|ruled?\s+out|rules\s+out|exclud\w*|cannot|absent|fails?\s+to|failed\s+to)\b|n['’]t\b")
"""A statement that names an option to set it aside: "nobody excluded X", "X cannot explain"."""

ATTRIBUTE = (r"\s*(?:['’]s?(?!\w)|(?:finding|findings|result|results|level|levels|dose|doses|dosing"
             r"|side[-\s]effects?|adverse|risk|risks|toxicity|trial|trials|data|criteria|score|timing|history"
             r"|exposure|use|interactions?|contraindications?|monitoring|threshold|pattern|reading|status"
             r"|hypothesis|theory|argument|route)\b)")
"""The option as an attribute's owner: "the ECG finding", "X's side effects", "lead levels"."""

STANDALONE = (r"\s*(?:$|[.,;:!?)\]—–]|(?:is|was|would|should|must|fits|seems|looks|remains|it|then|now|here"
              r"|instead|first|today|immediately|because|since|given|for|over|and|or)\b)")
"""After a letter or a value, what shows it stands for itself: "yes." but not "no placebo arm"."""
