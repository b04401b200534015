"""Maintainability index of every Python module under the given folders, on radon's scale.

    python scripts/maintainability.py shadowtutor services edge_agent

prints each module's index (0 to 100) and rank (A: over 19, B: 10 to 19, C: below 10) and exits 1
when a module ranks below A. The index is radon's (``radon mi -s``): 171 - 5.2 ln(V) - 0.23 G
- 16.2 ln(L) + 50 sin(sqrt(2.46 C)), scaled to 100, where V is the module's Halstead volume, G
its cyclomatic complexity, L its logical lines and C its share of comment lines (in radians of
its per cent). radon is not among the project's dependencies, so this computes the same terms
from the standard library's ``ast`` and ``tokenize``: V from the operators and operands of
arithmetic, boolean, comparison and augmented assignments (radon's Halstead visitor), G as the
sum of every function's complexity plus the module's own decisions, L as statements, C from
comment lines and docstring lines over source lines. Design note: docs/design/code_quality.md.
"""

from __future__ import annotations

import ast
import io
import math
import sys
import tokenize
from pathlib import Path

RANK_A = 19.0
RANK_B = 9.0


def halstead_volume(tree: ast.AST) -> float:
    """Halstead volume N log2(n) of the module's operators and operands (radon's visitor)."""
    operators: list[str] = []
    operands: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            operators.append(type(node.op).__name__)
            operands += [ast.dump(node.left), ast.dump(node.right)]
        elif isinstance(node, ast.UnaryOp):
            operators.append(type(node.op).__name__)
            operands.append(ast.dump(node.operand))
        elif isinstance(node, ast.BoolOp):
            operators += [type(node.op).__name__] * (len(node.values) - 1)
            operands += [ast.dump(value) for value in node.values]
        elif isinstance(node, ast.AugAssign):
            operators.append(type(node.op).__name__)
            operands += [ast.dump(node.target), ast.dump(node.value)]
        elif isinstance(node, ast.Compare):
            operators += [type(op).__name__ for op in node.ops]
            operands += [ast.dump(node.left)] + [ast.dump(c) for c in node.comparators]
    length = len(operators) + len(operands)
    vocabulary = len(set(operators)) + len(set(operands))
    return length * math.log2(vocabulary) if vocabulary > 1 else 0.0


def _decisions(node: ast.AST) -> int:
    """Decision points of ``node`` itself (not of what it contains)."""
    if isinstance(node, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler)):
        extra = 1 if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.orelse else 0
        return 1 + extra
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Try):
        return 1 if node.orelse else 0
    if isinstance(node, ast.match_case):
        return 1
    return 0


def complexity(tree: ast.AST) -> int:
    """Every function's cyclomatic complexity (1 + its decisions) plus the module's decisions."""
    total = 0
    for node in ast.walk(tree):
        total += _decisions(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            total += 1
    return total


def comment_share(source: str, tree: ast.AST) -> tuple[float, int]:
    """(per cent of comment and docstring lines among source lines, source lines)."""
    comments: set[int] = set()
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code.update(range(token.start[0], token.end[0] + 1))
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    lines = len(code | comments)
    commented = len(comments | docstrings)
    return (100.0 * commented / lines if lines else 0.0), lines


def maintainability(source: str) -> float:
    """The module's maintainability index, 0 to 100."""
    tree = ast.parse(source)
    volume = halstead_volume(tree)
    statements = sum(isinstance(node, ast.stmt) for node in ast.walk(tree))
    comments, _ = comment_share(source, tree)
    if volume <= 0 or statements <= 0:
        return 100.0
    raw = (
        171
        - 5.2 * math.log(volume)
        - 0.23 * complexity(tree)
        - 16.2 * math.log(statements)
        + 50 * math.sin(math.sqrt(2.46 * math.radians(comments)))
    )
    return min(max(0.0, raw * 100 / 171), 100.0)


def rank(index: float) -> str:
    """radon's rank of an index: A over 19, B over 9, else C."""
    return "A" if index > RANK_A else "B" if index > RANK_B else "C"


def main(folders: list[str]) -> int:
    """Print every module's index and rank; 1 when one ranks below A (2: no folder given)."""
    if not folders:
        print("usage: python scripts/maintainability.py FOLDER...", file=sys.stderr)
        return 2
    below = 0
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            index = maintainability(path.read_text(encoding="utf-8"))
            print(f"{path} - {rank(index)} ({index:.2f})")
            below += rank(index) != "A"
    print(f"{below} module(s) below A")
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
