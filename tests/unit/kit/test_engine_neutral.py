"""The kit knows no engine and imports nothing heavy: what makes it shareable."""

from __future__ import annotations

import re

from tests.support.commands import run_python
from tests.support.paths import REPO

KIT = REPO / "orchestrator" / "kit"
ENGINES = re.compile(r"sglang|vllm", re.IGNORECASE)


def test_nothing_in_the_kit_names_an_engine():
    named = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in sorted(KIT.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if ENGINES.search(line)]
    assert named == []


def test_the_engine_check_sees_a_name_in_any_case():
    assert [bool(ENGINES.search(text)) for text in ("SGLang 0.5.23", "import vllm", "VLLM_X",
                                                     "a large language model")] == \
        [True, True, True, False]


def test_every_name_of_the_kit_imports_without_torch_or_a_vendor_package():
    code = ("import sys, initorch.kit as kit\n"
            "values = [getattr(kit, name) for name in kit.__all__]\n"
            "print(len(values), sorted(m for m in ('torch', 'mooncake', 'networkx')"
            " if m in sys.modules))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    count, loaded = result.stdout.split(" ", 1)
    assert int(count) > 0 and loaded.strip() == "[]"


def test_importing_the_kit_loads_none_of_its_modules_until_a_name_is_read():
    code = ("import sys, initorch.kit\n"
            "print(sorted(m for m in sys.modules if m.startswith('initorch.kit.')))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
