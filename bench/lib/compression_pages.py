#!/usr/bin/env python3
"""Realistic HTML pages of exact sizes for bench/compression.sh (E4).

Usage: compression_pages.py DOCROOT [BURST_COPIES]

Writes DOCROOT/page-6040.html, page-11426.html, page-22132.html and
page-41518.html (the four page sizes of the published experiment, byte for
byte) and, for the burst test, BURST_COPIES distinct copies of each under
DOCROOT/burst/ (same size, a different title, so every one is a cold file of
its own). Pages are deterministic: a head with styles, navigation, articles
of English-like prose drawn with a Zipf distribution from a few hundred
words, a table, a footer - the mix of markup and text that makes real pages
compress 2.5-4x with gzip.
"""
import os
import random
import sys

SIZES = (6040, 11426, 22132, 41518)

WORDS = """the of and to a in is that for it as was with be by on not he this are or his from at which but have
an they you were her she there been one all we their has would when if so no will what can more out up them into
some only other than then its time could these two may first any like now my over such our man me even most made
after also did many before must through back years where much your way well down should because each just those
people how too little state good very make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since against go came right used take three
server request response cache page file network browser content header compression latency throughput memory thread
queue socket kernel connection client protocol version document index archive article section report update release
system design performance measure result table figure value average median percentile burst load policy threshold
static dynamic script style image font layout render text markup element attribute link anchor navigation footer
history research student teacher library university department museum garden river mountain city village market
weather morning evening summer winter spring autumn music theatre festival journey station harbour bridge castle""".split()

STYLE = """<style>
body{font-family:Georgia,serif;margin:0;padding:0;color:#222;background:#fafafa}
header,footer{background:#23395b;color:#fff;padding:1em 2em}
nav ul{list-style:none;margin:0;padding:0;display:flex;gap:1em}
nav a{color:#cfe0ff;text-decoration:none}
main{max-width:56em;margin:0 auto;padding:1em 2em}
article{margin-bottom:2em;border-bottom:1px solid #ddd}
h1,h2,h3{font-family:Helvetica,Arial,sans-serif;color:#23395b}
table{border-collapse:collapse;width:100%}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
.meta{color:#777;font-size:.85em}
</style>"""


def zipf_words(rng, n):
    # Weight ~ 1/rank: a few words are very common, most are rare.
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return rng.choices(WORDS, weights=weights, k=n)


def sentence(rng):
    words = zipf_words(rng, rng.randint(6, 18))
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", ".", "?", "!"])


def paragraph(rng):
    return "<p>" + " ".join(sentence(rng) for _ in range(rng.randint(2, 5))) + "</p>\n"


def blocks(rng):
    """An endless stream of page fragments."""
    n = 0
    while True:
        n += 1
        yield '<article id="a%d">\n<h2>%s</h2>\n<p class="meta">Posted %d-%02d-%02d by <a href="/people/%s">%s</a></p>\n' % (
            n, sentence(rng)[:-1], rng.randint(2001, 2024), rng.randint(1, 12), rng.randint(1, 28),
            rng.choice(WORDS), rng.choice(WORDS).capitalize())
        for _ in range(rng.randint(1, 3)):
            yield paragraph(rng)
        if n % 3 == 0:
            rows = "".join(
                "<tr><td>%s</td><td>%d</td><td>%d.%d ms</td></tr>\n" % (
                    rng.choice(WORDS), rng.randint(1, 99999), rng.randint(0, 999), rng.randint(0, 9))
                for _ in range(rng.randint(3, 6)))
            yield "<table>\n<tr><th>name</th><th>requests</th><th>time</th></tr>\n" + rows + "</table>\n"
        yield '<p><a href="/archive/%d.html">Read more</a></p>\n</article>\n' % n


def make_page(size, seed, title):
    rng = random.Random(seed)
    nav = "".join('<li><a href="/%s/">%s</a></li>' % (w, w.capitalize()) for w in rng.sample(WORDS, 8))
    head = ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            "<title>%s</title>\n%s\n</head>\n<body>\n<header><h1>%s</h1>\n<nav><ul>%s</ul></nav></header>\n<main>\n"
            % (title, STYLE, title, nav))
    tail = ('</main>\n<footer><p>&copy; 2024 tern benchmark pages. <a href="/about.html">About</a> '
            '<a href="/contact.html">Contact</a></p></footer>\n</body>\n</html>\n')
    body = []
    room = size - len(head) - len(tail)
    used = 0
    for frag in blocks(rng):
        if used + len(frag) + 16 > room:
            break
        body.append(frag)
        used += len(frag)
    # Fill the rest exactly with a comment of prose.
    left = room - used
    filler = ""
    while len(filler) < left:
        filler += " " + sentence(rng)
    comment = "<!--" + filler[: left - 9] + " -->\n"
    assert len(comment) == left, (len(comment), left)
    page = head + "".join(body) + comment + tail
    data = page.encode("ascii")
    assert len(data) == size, (len(data), size)
    return data


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = sys.argv[1]
    copies = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    os.makedirs(root, exist_ok=True)
    for size in SIZES:
        with open(os.path.join(root, "page-%d.html" % size), "wb") as f:
            f.write(make_page(size, size, "Page of %d bytes" % size))
    if copies:
        os.makedirs(os.path.join(root, "burst"), exist_ok=True)
        for size in SIZES:
            for i in range(copies):
                data = make_page(size, size, "Burst page %06d" % i + " " * 6)
                with open(os.path.join(root, "burst", "p%d-%d.html" % (size, i)), "wb") as f:
                    f.write(data)


if __name__ == "__main__":
    main()
