"""Twenty prompts whose continuations repeat text of the prompt, for the
speculative-decoding benchmark (bench/spec_bench.py): code edits, quotations
and summaries that quote, and extraction from public-domain text. Written
for a base (not instruction-tuned) model: each sets up a pattern the
continuation follows. The texts are in the public domain (US founding
documents, Lincoln, the King James Bible, Shakespeare, Dickens, Austen,
Melville, Carroll)."""

GETTYSBURG = (
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in "
    "Liberty, and dedicated to the proposition that all men are created equal. Now we are engaged in a great civil "
    "war, testing whether that nation, or any nation so conceived and so dedicated, can long endure. We are met on a "
    "great battle-field of that war. We have come to dedicate a portion of that field, as a final resting place for "
    "those who here gave their lives that that nation might live.")
PREAMBLE = (
    "We the People of the United States, in Order to form a more perfect Union, establish Justice, insure domestic "
    "Tranquility, provide for the common defence, promote the general Welfare, and secure the Blessings of Liberty to "
    "ourselves and our Posterity, do ordain and establish this Constitution for the United States of America.")
DECLARATION = (
    "We hold these truths to be self-evident, that all men are created equal, that they are endowed by their Creator "
    "with certain unalienable Rights, that among these are Life, Liberty and the pursuit of Happiness. That to secure "
    "these rights, Governments are instituted among Men, deriving their just powers from the consent of the "
    "governed.")
PSALM = (
    "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: he leadeth me beside the "
    "still waters. He restoreth my soul: he leadeth me in the paths of righteousness for his name's sake.")
SONNET = (
    "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\nRough winds do shake the "
    "darling buds of May,\nAnd summer's lease hath all too short a date;")
TWO_CITIES = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, "
    "it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of "
    "Darkness, it was the spring of hope, it was the winter of despair.")
AUSTEN = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of "
    "a wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood, "
    "this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful "
    "property of some one or other of their daughters.")
MELVILLE = (
    "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse, and "
    "nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of "
    "the world.")
CARROLL = (
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do: once "
    "or twice she had peeped into the book her sister was reading, but it had no pictures or conversations in it, "
    "'and what is the use of a book,' thought Alice 'without pictures or conversations?'")

CODE_STATS = '''def mean(values):
    total = 0.0
    for v in values:
        total += v
    return total / len(values)


def variance(values):
    m = mean(values)
    total = 0.0
    for v in values:
        total += (v - m) ** 2
    return total / len(values)
'''
CODE_CACHE = '''class Cache:
    def __init__(self, size):
        self.size = size
        self.keys = [None] * size
        self.values = [None] * size

    def put(self, index, key, value):
        self.keys[index % self.size] = key
        self.values[index % self.size] = value

    def get(self, index):
        return self.keys[index % self.size], self.values[index % self.size]
'''
CODE_C = '''int sum_array(const int* data, int n) {
    int total = 0;
    for (int i = 0; i < n; ++i) {
        total += data[i];
    }
    return total;
}
'''

PROMPTS = [
    # Quotation and quoting summaries.
    GETTYSBURG + "\n\nThe speech above, quoted in full:\n\"Four score",
    PREAMBLE + "\n\nQuote the Preamble exactly as written above:\n\"We the People",
    DECLARATION + "\n\nThe key sentence, quoted: \"We hold these truths",
    PSALM + "\n\nRepeat the verses above:\nThe LORD is my shepherd;",
    SONNET + "\n\nThe first four lines again:\nShall I compare",
    TWO_CITIES + "\n\nIn summary, Dickens opens with a list of contrasts: \"It was the best of times,",
    AUSTEN + "\n\nThe novel's famous first sentence reads: \"It is a truth",
    MELVILLE + "\n\nA student copied the opening paragraph into her notes:\nCall me Ishmael.",
    CARROLL + "\n\nThe same passage, read aloud by the teacher:\nAlice was beginning",
    "Article I. " + PREAMBLE + "\nArticle II. " + PREAMBLE[:120] + "\nArticle III. We the People",
    # Code edits: the same code again with a change.
    CODE_STATS + "\n\n# The same two functions, with `values` renamed to `xs`:\n\ndef mean(xs):\n",
    CODE_CACHE + "\n\n# The same class with type hints added:\n\nclass Cache:\n    def __init__(self, size: int) -> None:\n",
    CODE_C + "\n// The same function for doubles:\n\ndouble sum_array(const double* data, int n) {\n",
    CODE_STATS + "\n\n# A copy of the code above, unchanged:\n\ndef mean(values):\n",
    CODE_CACHE + "\n\n# Rename the class to RingCache (nothing else changes):\n\nclass RingCache:\n",
    # Extraction from text into a fixed format.
    "Text: " + GETTYSBURG + "\n\nEach sentence of the text on its own line:\n1. Four score and seven years ago",
    "Text: " + DECLARATION + "\n\nThe rights listed in the text: Life, Liberty and the pursuit of Happiness.\n"
    "Sentences of the text that mention rights:\n- We hold these truths",
    "Records:\nname=Alice age=34 city=Paris\nname=Bob age=27 city=Berlin\nname=Carol age=45 city=Madrid\n"
    "name=Dave age=31 city=Rome\nname=Erin age=29 city=Vienna\n\nThe same records as CSV:\nname,age,city\nAlice,34,Paris\n",
    "Menu: coffee 2.50, tea 2.00, juice 3.00, water 1.00, cake 4.50, bread 1.50.\n\nAs a list:\n- coffee: 2.50\n",
    "Log:\n12:00:01 INFO server started on port 8080\n12:00:02 INFO loaded model gemma\n12:00:05 WARN slow "
    "request /v1/completions 2.3 s\n12:00:09 INFO request done 200\n\nThe same log, lines starting with INFO only:\n"
    "12:00:01 INFO server started",
]

assert len(PROMPTS) == 20
