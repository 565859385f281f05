#!/usr/bin/env python3
"""docs/api.md from the public headers, and the check that keeps both honest.

Every public function of include/ember/*.h (free functions and the public members of classes,
outside namespace `detail`) must have a doc comment: a `//` comment on the lines right above
it, or above the run of declarations it belongs to (declarations on consecutive lines share
the comment above the first), or at the end of its own line. A comment that is only a section
banner (`// ---- views ----`) does not count. docs/api.md lists every public function by
header with its doc line and is generated from the headers by this script.

    scripts/api_docs.py          # exit 1 naming undocumented functions or a stale docs/api.md
    scripts/api_docs.py --write  # rewrite docs/api.md from the headers
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADERS = sorted((ROOT / "include" / "ember").glob("*.h"))
API_MD = ROOT / "docs" / "api.md"
BANNER = re.compile(r"^-{3,}.*-{3,}$")


def strip_strings(line):
    """line with the insides of string and character literals blanked (same length)."""
    blank = lambda m: m.group(0)[0] + "_" * (len(m.group(0)) - 2) + m.group(0)[-1]
    return re.sub(r'"(\\.|[^"\\])*"', blank, re.sub(r"'(\\.|[^'\\])*'", blank, line))


def doc_text(comment_lines):
    """The comment lines that say something (banners dropped), joined; "" when none."""
    said = [c for c in comment_lines if c and not BANNER.match(c)]
    return " ".join(said)


def skip_balanced(s, i, open_ch, close_ch):
    """The index just past the bracket that closes the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_ch:
            depth += 1
        elif s[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def function_decl(stmt):
    """(name, signature) of the function a statement declares, or None."""
    s = re.sub(r"\s+", " ", stmt).strip()
    prefix = ""
    if s.startswith("template"):
        end = skip_balanced(s, s.index("<"), "<", ">")
        prefix, s = s[:end] + " ", s[end:].strip()
    if s.startswith("requires"):
        rest = s[len("requires"):].lstrip()
        if rest.startswith("("):
            end = skip_balanced(rest, 0, "(", ")")
        else:  # requires A<B> [&& ...] then the return type
            m = re.match(r"[\w:]+(<[^()]*?>)?(\s*(&&|\|\|)\s*[\w:]+(<[^()]*?>)?)*", rest)
            end = m.end() if m else 0
        prefix += s[: len(s) - len(rest) + end] + " "
        s = rest[end:].strip()
    if re.match(r"^(using|typedef|friend|static_assert|return|namespace|enum|class|struct)\b", s):
        return None
    m = re.search(r"\boperator\s*(\(\)|[^\s(]+)\s*\(", s)
    if m:
        name, paren = "operator" + m.group(1), m.end() - 1
    else:
        depth, paren, name = 0, -1, None  # angle brackets before the parameter list
        for i, ch in enumerate(s):
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0:
                m = re.search(r"(~?[A-Za-z_]\w*)\s*$", s[:i])
                if not m or m.group(1) in ("if", "for", "while", "switch", "decltype", "alignas",
                                           "sizeof", "noexcept"):
                    return None
                if s[i + 1:].lstrip().startswith("*"):
                    return None  # a function pointer
                if m.group(1).startswith("~") or "=" in s[: m.start()]:
                    return None  # destructors need no doc; a variable initialized by a call
                name, paren = m.group(1), i
                break
            elif ch in "={;":
                return None
        if name is None:
            return None
    end = skip_balanced(s, paren, "(", ")")
    tail = re.match(r"\s*((const|override|noexcept|final|&&|&)\s*)*", s[end:]).group(0)
    if re.match(r"\s*=\s*(delete|default)", s[end + len(tail):]):
        return None
    return name, (prefix + s[:end] + tail).strip()


def scan(path):
    """(name, signature, doc, line) of each public function of one header; and the problems."""
    lines = path.read_text().splitlines()
    found, undocumented = [], []
    # Scopes: ("ns", name) | ("class", access) | ("body",)
    stack = []
    pending = []  # comment lines right above the current position
    group_doc = None  # doc of the run of declarations the previous line ended
    stmt, stmt_start, stmt_doc = "", 0, None
    parens = 0  # ( and [ open in the statement: braces there are initializers
    in_block_comment = False
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if in_block_comment:
            in_block_comment = "*/" not in line
            continue
        if line.startswith("/*"):
            in_block_comment = "*/" not in line
            continue
        if line.startswith("#") or not line:
            if not line:
                pending, group_doc = [], None
            continue
        if line.startswith("//"):
            pending.append(line[2:].strip())
            continue
        blanked = strip_strings(raw)
        cut = blanked.find("//")
        code = (blanked if cut < 0 else blanked[:cut]).strip()
        trailing = "" if cut < 0 else raw[cut + 2:]
        inside_body = any(s[0] == "body" for s in stack)
        public = not inside_body and all(
            not (s[0] == "ns" and s[1] == "detail") and not (s[0] == "class" and s[1] != "public")
            for s in stack)
        m = re.match(r"^(public|private|protected)\s*:", code)
        if m and stack and stack[-1][0] == "class":
            stack[-1] = ("class", m.group(1))
            pending, group_doc = [], None
            continue
        if not stmt:
            stmt_start = no
            doc = doc_text(pending)
            stmt_doc = doc if doc else group_doc
        stmt += " "
        trailing_doc = trailing.strip()
        # Walk the braces of this line to find where statements end and scopes open.
        ended = False
        for ch in code:
            stmt += ch
            if ch in "([":
                parens += 1
            elif ch in ")]":
                parens -= 1
            if parens > 0:
                continue
            if ch == "{":
                text = stmt[:-1].strip()
                if inside_body or any(s[0] == "body" for s in stack):
                    stack.append(("body",))
                elif re.match(r"^namespace\b", text):
                    stack.append(("ns", (re.findall(r"namespace\s+([\w:]+)", text) or [""])[0]))
                    stmt = ""
                    continue
                elif re.search(r"\b(class|struct|union)\b[^(]*$", text) and \
                        not re.search(r"\)\s*(const)?\s*$", text):
                    kind = re.search(r"\b(class|struct|union)\b", text).group(1)
                    stack.append(("class", "private" if kind == "class" else "public"))
                    stmt = ""
                    continue
                elif re.search(r"\benum\b", text) or "=" in text.split("(")[0]:
                    stack.append(("body",))
                else:
                    decl = function_decl(text)
                    if decl and public:
                        found.append((*decl, trailing_doc or stmt_doc, stmt_start))
                    stack.append(("body",))
                ended = True
            elif ch == "}":
                if stack:
                    stack.pop()
                if not any(s[0] == "body" for s in stack):
                    stmt = ""
            elif ch == ";" and not any(s[0] == "body" for s in stack):
                decl = function_decl(stmt.strip())
                if decl and public:
                    found.append((*decl, trailing_doc or stmt_doc, stmt_start))
                stmt = ""
                ended = True
        if ended and not stmt.strip():
            group_doc = stmt_doc
            stmt = ""
            pending = []
        elif not stmt.strip():
            pending = []
    for name, sig, doc, no in found:
        if not doc:
            undocumented.append(f"{path.relative_to(ROOT)}:{no}: {name} has no doc comment")
    return found, undocumented


def render():
    out = ["# ember's public API", "",
           "Every public function of `include/ember/`, by header, with its doc comment. Generated",
           "from the headers by `scripts/api_docs.py --write`; `scripts/test.sh` fails when a",
           "public function lacks a doc comment or this page is out of date.", ""]
    problems = []
    for h in HEADERS:
        found, undocumented = scan(h)
        problems += undocumented
        if not found:
            continue
        summary = []
        for line in h.read_text().splitlines():
            if not line.startswith("//"):
                break
            summary.append(line[2:].strip())
        out += [f"## ember/{h.name}", "", " ".join(summary), ""]
        # Runs of functions that share one comment are listed under it.
        groups = []
        for _, sig, doc, _ in found:
            sig = re.sub(r"\s+", " ", sig)
            if groups and groups[-1][0] == doc:
                groups[-1][1].append(sig)
            else:
                groups.append((doc, [sig]))
        for doc, sigs in groups:
            if len(sigs) == 1:
                out.append(f"- `{sigs[0]}`: {doc}")
            else:
                out.append(f"- {doc}")
                out += [f"  - `{sig}`" for sig in sigs]
        out.append("")
    return "\n".join(out), problems


def main():
    text, problems = render()
    if "--write" in sys.argv:
        API_MD.write_text(text)
    for p in problems:
        print(p, file=sys.stderr)
    stale = API_MD.read_text() != text if API_MD.exists() else True
    if stale:
        print("docs/api.md is not what the headers say: run scripts/api_docs.py --write",
              file=sys.stderr)
    return 1 if problems or stale else 0


if __name__ == "__main__":
    sys.exit(main())
