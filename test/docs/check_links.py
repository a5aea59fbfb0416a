#!/usr/bin/env python3
"""Checks the documentation's links: README.md and docs/*.md.

Every relative link (inline `[text](target)`, image, or reference definition `[id]: target`)
must name a file or directory that exists in the repository, and its `#anchor`, if any, a
heading of the Markdown file it names (the same file for a bare `#anchor`), as GitHub
renders heading anchors: lowercase, spaces to '-', punctuation other than '-' and '_'
removed, a repeated heading's anchor suffixed -1, -2, .... Links to other sites
(`https:`, `mailto:`, ...) are not fetched. Code spans and fenced code blocks are not
links. README.md is the front door: it must stay at most 320 lines and link every file in
docs/.

Usage: check_links.py [REPO_ROOT] [--self-test]
Python 3, standard library only. Exits 0 when everything resolves, 1 otherwise.
"""
import pathlib
import re
import sys
import tempfile
import unicodedata
from urllib.parse import unquote

README_MAX_LINES = 320

FENCE = re.compile(r'^ {0,3}(`{3,}|~{3,})')
HEADING = re.compile(r'^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$')
SETEXT = re.compile(r'^ {0,3}(=+|-+)[ \t]*$')
CODE_SPAN = re.compile(r'(`+)(?:(?!\1)(?!\n[ \t]*\n).)+?\1', re.S)   # within a paragraph
# [text](target "title") or ![alt](<target>); text may span lines and hold one level of brackets.
INLINE_LINK = re.compile(
    r'!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)'
    r'(?:\s+(?:"[^"]*"|\'[^\']*\'|\([^)]*\)))?\s*\)')
REFERENCE_DEF = re.compile(r'^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)', re.M)
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')


def github_slug(heading_text):
    """The anchor GitHub gives a heading (before de-duplication)."""
    text = heading_text.strip()
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)   # links and images: their text
    text = re.sub(r'<[^>]+>', '', text)                      # inline HTML tags
    text = text.replace('`', '')
    text = text.lower()
    kept = []
    for ch in text:
        if ch in '-_ ':
            kept.append('-' if ch == ' ' else ch)
        elif unicodedata.category(ch)[0] in 'LNM':               # letters, digits, marks
            kept.append(ch)
    return ''.join(kept)


def blank_code(text, spans=True):
    """The text with fenced code blocks (and code spans) blanked out, line numbers kept."""
    out, fence = [], None
    for line in text.split('\n'):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append('')
        elif fence is not None:
            if m and m.group(1).startswith(fence) and line.strip().strip(fence[0]) == '':
                fence = None
            out.append('')
        else:
            out.append(line)
    text = '\n'.join(out)
    return CODE_SPAN.sub(lambda m: ' ' * len(m.group(0)), text) if spans else text


def anchors(path, cache={}):
    """The heading anchors of one Markdown file."""
    if path not in cache:
        lines = blank_code(path.read_text(encoding='utf-8'), spans=False).split('\n')
        seen, found = {}, set()
        for i, line in enumerate(lines):
            title = None
            m = HEADING.match(line)
            if m:
                title = m.group(2) or ''
            elif (i > 0 and lines[i - 1].strip() and SETEXT.match(line)
                  and not HEADING.match(lines[i - 1]) and line.strip()[0] == '='):
                title = lines[i - 1]
            if title is None:
                continue
            slug = github_slug(title)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f'{slug}-{n}')
        # Explicit HTML anchors count too.
        for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', '\n'.join(lines)):
            found.add(m.group(1))
        cache[path] = found
    return cache[path]


def links(text):
    """(line number, target) of every link in a Markdown text, code excluded."""
    clean = blank_code(text)
    for pattern in (INLINE_LINK, REFERENCE_DEF):
        for m in pattern.finditer(clean):
            target = m.group(1).strip()
            if target.startswith('<') and target.endswith('>'):
                target = target[1:-1]
            yield clean.count('\n', 0, m.start(1)) + 1, target


def check_file(root, md):
    """Problems with the links of one Markdown file, as strings."""
    problems = []
    rel = md.relative_to(root)
    for line, target in links(md.read_text(encoding='utf-8')):
        where = f'{rel}:{line}: link "{target}"'
        if not target:
            problems.append(f'{where}: empty target')
            continue
        if SCHEME.match(target) or target.startswith('//'):
            continue                                  # another site: not checked
        path_part, _, anchor = target.partition('#')
        path_part = unquote(path_part.split('?', 1)[0])
        if path_part.startswith('/'):
            dest = (root / path_part.lstrip('/')).resolve()
        elif path_part:
            dest = (md.parent / path_part).resolve()
        else:
            dest = md.resolve()
        try:
            dest.relative_to(root.resolve())
        except ValueError:
            problems.append(f'{where}: points outside the repository')
            continue
        if not dest.exists():
            problems.append(f'{where}: {dest.relative_to(root.resolve())} does not exist')
            continue
        if anchor:
            if dest.is_dir() or dest.suffix.lower() != '.md':
                problems.append(f'{where}: an anchor into a file that is not Markdown')
            elif unquote(anchor) not in anchors(dest):
                problems.append(f'{where}: no heading with the anchor #{anchor} in '
                                f'{dest.relative_to(root.resolve())}')
    return problems


def check(root):
    root = pathlib.Path(root)
    problems = []
    readme = root / 'README.md'
    docs = sorted((root / 'docs').glob('*.md'))
    if not readme.is_file():
        return ['README.md does not exist']
    for md in [readme] + docs:
        problems += check_file(root, md)
    readme_text = readme.read_text(encoding='utf-8')
    count = len(readme_text.splitlines())
    if count > README_MAX_LINES:
        problems.append(f'README.md has {count} lines, more than {README_MAX_LINES}: '
                        'details belong in docs/, one topic a file')
    linked = {(root / unquote(t.partition('#')[0])).resolve()
              for _, t in links(readme_text) if not SCHEME.match(t)}
    for doc in docs:
        if doc.resolve() not in linked:
            problems.append(f'README.md does not link {doc.relative_to(root)}')
    return problems


def self_test():
    """The checker against small trees with known faults."""
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    expect(github_slug('cgroup v2 beside v1: reaction, and what unrelated BPF activity costs')
           == 'cgroup-v2-beside-v1-reaction-and-what-unrelated-bpf-activity-costs', 'slug: colon')
    expect(github_slug('Against a hand-written fixer (cgroup v1)')
           == 'against-a-hand-written-fixer-cgroup-v1', 'slug: parentheses')
    expect(github_slug('The first run: from `git clone` to the demo')
           == 'the-first-run-from-git-clone-to-the-demo', 'slug: code span')
    expect(github_slug('snake_case and café') == 'snake_case-and-café', 'slug: _ and letters')
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / 'docs').mkdir()
        (root / 'docs' / 'a.md').write_text(
            '# A\n\n## Same\n\n## Same\n\n[up](../README.md#top) [b](b.md)\n'
            '```\n[not a link](nowhere.md)\n```\n`[nor](this.md)`\n')
        (root / 'README.md').write_text(
            '# Top\n\n[a](docs/a.md#same-1) [web](https://example.com/x#y)\n'
            '[ref]: docs/a.md#a\n')
        p = check(root)
        expect(p == ['docs/a.md:7: link "b.md": docs/b.md does not exist'],
               f'missing file only: {p}')
        (root / 'docs' / 'b.md').write_text('# B\n\n[x](a.md#same-2) [y](#b)\n')
        p = check(root)
        expect(any('#same-2' in x for x in p), f'duplicate heading anchor: {p}')
        expect(any('does not link docs/b.md' in x for x in p), f'unlinked doc: {p}')
        expect(len(p) == 2, f'exactly two problems: {p}')
        (root / 'docs' / 'b.md').write_text('# B\n\n[x](a.md#same-1) [y](#b)\n')
        (root / 'README.md').write_text('# Top\n\n[a](docs/a.md) [b](docs/b.md)\n'
                                        + 'line\n' * README_MAX_LINES)
        p = check(root)
        expect(len(p) == 1 and 'more than 320' in p[0], f'README length: {p}')
    for f in failures:
        print(f'self-test failed: {f}', file=sys.stderr)
    return not failures


def main(argv):
    args = [a for a in argv if a != '--self-test']
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parents[2])
    if '--self-test' in argv and not self_test():
        return 1
    problems = check(root)
    for p in problems:
        print(p, file=sys.stderr)
    docs = len(list((root / 'docs').glob('*.md')))
    if problems:
        print(f'{len(problems)} problem(s) in README.md and {docs} docs/ file(s)', file=sys.stderr)
        return 1
    print(f'README.md ({len((root / "README.md").read_text().splitlines())} lines) and '
          f'{docs} docs/ file(s): every relative link and anchor resolves')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
