#!/usr/bin/env python3
"""Writes the Python package's copy of the device-family table from the C++ one, src/common/vendor.hpp.

The table (`kDeviceFamilies`, rows of `struct DeviceFamily`) is the one source; python/setup.py runs this script
every time the package is built (pip install ./python, the CMake target tessera_torch), so the copy cannot drift
from the table it is built with. The generated module is not committed.

    scripts/gen-families-py.py OUT.py     # writes the module (python/tessera/_families.py when setup.py runs it)
    scripts/gen-families-py.py --rows     # prints the rows it reads, one a line, fields tab-separated (vendors
                                          # space-separated, booleans 1/0): DeviceFamilies.* in common_test
                                          # compares them with the compiled table
Anything in the table this parser does not understand (a field that is not a string literal or true/false, a
row with too many fields) is an error naming the row, never a guess.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, 'src', 'common', 'vendor.hpp')

STRING = r'"(?:[^"\\]|\\.)*"'
TOKEN = re.compile(r'\s*(' + STRING + r'(?:\s*' + STRING + r')*|true|false)\s*$', re.S)


def fail(msg):
    sys.exit(f'gen-families-py: {HEADER}: {msg}')


def strip_comments(text):
    """The text without // and /* */ comments (string literals kept as they are)."""
    return re.sub(r'(' + STRING + r')|//[^\n]*|/\*.*?\*/', lambda m: m.group(1) or ' ', text, flags=re.S)


def value(token, where):
    m = TOKEN.fullmatch(token)
    if not m:
        fail(f'{where}: {token.strip()!r} is not a string literal or true/false')
    t = m.group(1)
    if t in ('true', 'false'):
        return t == 'true'
    return ''.join(re.sub(r'\\(.)', r'\1', part[1:-1]) for part in re.findall(STRING, t))


def split_top(body):
    """The comma-separated items of `body`, commas inside string literals kept."""
    items, cur = [], ''
    for m in re.finditer(r'(' + STRING + r')|([^",]+)|(,)', body, re.S):
        if m.group(3):
            items.append(cur)
            cur = ''
        else:
            cur += m.group(0)
    if cur.strip():
        items.append(cur)
    return items


def fields(text):
    """[(name, default or None)] of struct DeviceFamily, in declaration order."""
    m = re.search(r'struct\s+DeviceFamily\s*\{(.*?)\n\};', text, re.S)
    if not m:
        fail('no `struct DeviceFamily { ... };`')
    out = []
    for decl in m.group(1).split(';'):
        decl = decl.strip()
        if not decl:
            continue
        d = re.fullmatch(r'(?:const\s+char\s*\*|bool)\s*(\w+)\s*(?:=\s*(.*))?', decl, re.S)
        if not d:
            fail(f'struct DeviceFamily: member {decl!r} is not `const char* NAME` or `bool NAME` (with an optional '
                 'default)')
        out.append((d.group(1), value(d.group(2), f'the default of {d.group(1)}') if d.group(2) else None))
    return out


def rows(text=None):
    """[{field: value}] of kDeviceFamilies, in table order."""
    if text is None:
        with open(HEADER) as f:
            text = f.read()
    text = strip_comments(text)
    names = fields(text)
    m = re.search(r'kDeviceFamilies\[\]\s*=\s*\{(.*?)\n\};', text, re.S)
    if not m:
        fail('no `kDeviceFamilies[] = { ... };`')
    out = []
    for i, row in enumerate(re.findall(r'\{((?:' + STRING + r'|[^{}"])*)\}', m.group(1), re.S)):
        items = split_top(row)
        where = f'kDeviceFamilies row {i} ({items[0].strip() if items else "empty"})'
        if len(items) > len(names):
            fail(f'{where}: {len(items)} values for the {len(names)} fields of DeviceFamily')
        r = {}
        for (name, default), item in zip(names, items + [None] * (len(names) - len(items))):
            if item is None:
                if default is None:
                    fail(f'{where}: no value for {name}, which has no default')
                r[name] = default
            else:
                r[name] = value(item, f'{where}, field {name}')
        out.append(r)
    if not out:
        fail('kDeviceFamilies has no rows')
    return out


def module(table):
    """The text of the generated module."""
    names = list(table[0])
    lines = [
        '"""The device families this build knows: the Python copy of src/common/vendor.hpp\'s kDeviceFamilies,',
        'written by scripts/gen-families-py.py when the package is built (do not edit; not committed).',
        'Fields as in the C++ struct DeviceFamily; `vendors` is a tuple, the usual island name first."""',
        'import collections',
        '',
        f'DeviceFamily = collections.namedtuple("DeviceFamily", {names!r})',
        '',
        'FAMILIES = (',
    ]
    for r in table:
        vals = dict(r, vendors=tuple(r['vendors'].split()))
        lines.append('    DeviceFamily(' + ', '.join(f'{k}={v!r}' for k, v in vals.items()) + '),')
    lines.append(')')
    return '\n'.join(lines) + '\n'


def main(argv):
    if argv == ['--rows']:
        for r in rows():
            print('\t'.join(str(int(v)) if isinstance(v, bool) else v for v in r.values()))
        return 0
    if len(argv) != 1 or argv[0].startswith('-'):
        print(__doc__, file=sys.stderr)
        return 2
    text = module(rows())
    old = None
    if os.path.exists(argv[0]):
        with open(argv[0]) as f:
            old = f.read()
    if old != text:  # unchanged: not rewritten, so a build that depends on its time stamp stays current
        tmp = argv[0] + '.tmp'
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, argv[0])
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
