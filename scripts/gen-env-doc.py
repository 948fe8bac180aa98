#!/usr/bin/env python3
"""Writes docs/env.md, the table of every TESSERA_* variable, from its declarations in src/common/env_vars.inc.

Each `// ---- TITLE` comment of the declarations starts a section of the page; a variable documented on another
page (its `where documented` field is not docs/env.md) gets a row that links there. Edit the declarations, then run

    scripts/gen-env-doc.py            # rewrites docs/env.md
    scripts/gen-env-doc.py --check    # exit 1 when docs/env.md is not what the declarations give (ctest: env_doc_current)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INC = os.path.join(ROOT, 'src', 'common', 'env_vars.inc')
PAGE = os.path.join(ROOT, 'docs', 'env.md')

HEADER = """# Environment variables

<!-- Generated from src/common/env_vars.inc by scripts/gen-env-doc.py: edit the declarations, not this page.
     ctest env_doc_current fails when the two differ. -->

Each `TESSERA_*` variable is declared once, in `src/common/env_vars.inc` (name, parser, default, page, one-line
doc); the code reads it through `src/common/env.hpp`, whose getters take the declared default. A variable whose
page is not this one is described there; its row here links to it. The Slurm variables `tessera run` reads are in
[launcher.md](launcher.md#inside-slurm).
"""

STRING = r'"(?:[^"\\]|\\.)*"'
DECL = re.compile(r'TSR_ENV_VAR\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(nullptr|' + STRING + r')\s*,\s*(' + STRING + r')\s*,\s*(' +
                  STRING + r')\s*,\s*((?:' + STRING + r'\s*)+)\)', re.S)
SECTION = re.compile(r'^// ---- (.*)$', re.M)


def unquote(lit):
    """The value of one or more adjacent C string literals."""
    out = ''
    for part in re.findall(STRING, lit):
        out += re.sub(r'\\(.)', r'\1', part[1:-1])
    return out


def declarations(text):
    """[(section title, [(name, default text, page, doc)])] in declaration order."""
    marks = [(m.start(), m.group(1).strip()) for m in SECTION.finditer(text)]
    sections = []
    for m in DECL.finditer(text):
        title = 'Variables'
        for pos, t in marks:
            if pos < m.start():
                title = t
        if not sections or sections[-1][0] != title:
            sections.append((title, []))
        sections[-1][1].append((m.group(1), unquote(m.group(4)), unquote(m.group(5)), unquote(m.group(6))))
    return sections


def render(text):
    out = [HEADER]
    for title, rows in declarations(text):
        out.append('## ' + title[0].upper() + title[1:] + '\n')
        out.append('| variable | default | meaning |')
        out.append('|---|---|---|')
        for name, default, page, doc in rows:
            if page != 'docs/env.md':
                link = os.path.basename(page)
                doc = 'described in [{}]({})'.format(link, link)
            out.append('| `{}` | {} | {} |'.format(name, default, doc.replace('|', '\\|')))
        out.append('')
    return '\n'.join(out)


def main():
    want = render(open(INC, encoding='utf-8').read())
    if sys.argv[1:] == ['--check']:
        have = open(PAGE, encoding='utf-8').read() if os.path.exists(PAGE) else ''
        if have != want:
            sys.stderr.write('docs/env.md is not what src/common/env_vars.inc declares: run scripts/gen-env-doc.py\n')
            return 1
        return 0
    if sys.argv[1:]:
        sys.stderr.write(__doc__)
        return 2
    with open(PAGE, 'w', encoding='utf-8') as f:
        f.write(want)
    return 0


if __name__ == '__main__':
    sys.exit(main())
