# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print the pinned `test` extra of pyproject.toml, one requirement a line.

pyproject.toml is the one place the toolchain's direct pins are written; `make venv`
feeds this output to pip as a requirements file, since the collection itself is not a
package pip could install with its extras.
"""

import sys
import tomllib
from pathlib import Path


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "pyproject.toml")
    extra = argv[2] if len(argv) > 2 else "test"
    with path.open("rb") as handle:
        project = tomllib.load(handle).get("project", {})
    requirements = project.get("optional-dependencies", {}).get(extra)
    if not requirements:
        print(f"{path}: no [project.optional-dependencies] {extra!r} list", file=sys.stderr)
        return 1
    for requirement in requirements:
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
