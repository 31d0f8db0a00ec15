"""The README's Python example runs as written, and what it prints holds."""
import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1, "expected exactly one python block in README.md"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], "README.md", "exec"), {})
    text = printed.getvalue()
    ratio = float(re.search(r"\(([\d.]+)x smaller\)", text).group(1))
    cos = float(re.search(r"cosine ([\d.]+)", text).group(1))
    assert "4096 tokens" in text
    assert ratio >= 3.5
    assert cos >= 0.98, text
