#!/usr/bin/env python3
"""tests/structure/doc_examples: runs every command block of README.md and docs/*.md that is marked as an
example, so that an example keeps working on the day it is read (a date-dependent answer, a renamed flag).

A block is marked by an HTML comment on the line before its opening fence:

    <!-- example -->            every command exits 0
    <!-- example: exit 1 -->    the last command exits 1 (the others 0)

A transcript block (lines starting with `$ `) runs those commands, `cd` included, and the first line of each
command's output must be the one shown. In a plain block every line is a command (`\\` continues it; a trailing
`# comment` and `[--alternative | ...]` are dropped). `build/tessera` and `tessera` are the binary under test;
commands run from the source tree with a scratch TESSERA_HOME.

Usage: doc_examples.py TESSERA SRC_DIR (ctest: doc_examples)."""
import os
import re
import shlex
import subprocess
import sys
import tempfile

MARK = re.compile(r'^<!--\s*example(?::\s*exit\s+(\d+))?\s*-->\s*$')


def blocks(path):
    """(line number, wanted exit of the last command, lines) of each marked block of one file."""
    lines = open(path, encoding='utf-8').read().split('\n')
    out = []
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m or i + 1 >= len(lines) or not lines[i + 1].startswith('```'):
            continue
        body = []
        for j in range(i + 2, len(lines)):
            if lines[j].startswith('```'):
                break
            body.append(lines[j])
        out.append((i + 2, int(m.group(1) or 0), body))
    return out


def join_continued(lines):
    out, cur = [], ''
    for line in lines:
        if line.rstrip().endswith('\\'):
            cur += line.rstrip()[:-1] + ' '
        else:
            out.append(cur + line)
            cur = ''
    if cur:
        out.append(cur)
    return out


def commands(body):
    """[(command, first output line shown or None)] of a block."""
    if any(line.startswith('$ ') for line in body):
        out, i = [], 0
        while i < len(body):
            if not body[i].startswith('$ '):
                i += 1
                continue
            cmd = [body[i][2:]]
            while cmd[-1].rstrip().endswith('\\') and i + 1 < len(body):
                i += 1
                cmd.append(body[i])
            i += 1
            shown = None
            while i < len(body) and not body[i].startswith('$ '):
                if shown is None and body[i].strip():
                    shown = body[i].strip()
                i += 1
            out.append((join_continued(cmd)[0], shown))
        return out
    out = []
    for line in join_continued(body):
        line = re.sub(r'\s+#\s.*$', '', line)
        line = re.sub(r'\s*\[--[^\]]*\]', '', line).strip()
        if line and not line.startswith('#'):
            out.append((line, None))
    return out


def main():
    binary, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    docs = [os.path.join(src, 'README.md')] + sorted(
        os.path.join(src, 'docs', f) for f in os.listdir(os.path.join(src, 'docs')) if f.endswith('.md'))
    home = tempfile.mkdtemp(prefix='tessera-doc-examples-')
    env = {k: v for k, v in os.environ.items() if k not in ('TESSERA_LEDGER', 'TESSERA_DAEMON', 'TESSERA_DAEMON_TOKEN')}
    env['TESSERA_HOME'] = home
    failures = ran = 0
    for doc in docs:
        rel = os.path.relpath(doc, src)
        for line, want_last, body in blocks(doc):
            cwd = src
            cmds = commands(body)
            for k, (cmd, shown) in enumerate(cmds):
                words = shlex.split(cmd)
                if words and words[0] == 'cd':
                    cwd = os.path.normpath(os.path.join(cwd, words[1]))
                    continue
                run = re.sub(r'^(build/)?tessera\b', lambda _: shlex.quote(binary), cmd)
                want = want_last if k == len(cmds) - 1 else 0
                r = subprocess.run(['bash', '-c', run], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
                ran += 1
                first = next((l.strip() for l in r.stdout.split('\n') if l.strip()), '')
                problem = None
                if r.returncode != want:
                    problem = f'exited {r.returncode}, want {want}'
                elif shown is not None and shown != '...' and first != shown:
                    problem = f'first line differs:\n    shown: {shown}\n    got:   {first}'
                if problem:
                    failures += 1
                    print(f'FAILED: {rel}:{line}: {cmd}\n  {problem}')
                    print('\n'.join('    ' + l for l in r.stdout.rstrip().split('\n')[:8]))
                else:
                    print(f'ok: {rel}:{line}: {cmd[:100]}')
    subprocess.run(['rm', '-rf', home])
    print(f'{ran} example command(s), {failures} failure(s)')
    if ran == 0:
        print('FAILED: no marked example found')
        return 1
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
