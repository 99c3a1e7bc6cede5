"""DataError: a data file has a bad row. Every problem names the file, the row (and uuid when known),
the field path, what is wrong and how to fix it; all rows are checked before one error is raised."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LISTED = 20


@dataclass(frozen=True)
class Problem:
    file: str
    row: int | None  # 0-based row index; None for file-level problems
    field: str
    what: str
    fix: str
    uuid: str | None = None
    line: int | None = None  # 1-based line in a JSONL file

    def __str__(self) -> str:
        where = self.file
        if self.row is not None:
            where += f": row {self.row}"
            if self.line is not None:
                where += f" (line {self.line})"
        if self.uuid:
            where += f" (uuid {self.uuid!r})"
        return f"{where}: field '{self.field}': {self.what}; fix: {self.fix}"


class DataError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        if not problems:
            raise ValueError("DataError needs at least one problem")
        self.problems = list(problems)
        lines = [str(p) for p in problems[:MAX_LISTED]]
        if len(problems) > MAX_LISTED:
            lines.append(f"... and {len(problems) - MAX_LISTED} more problems")
        head = f"{len(problems)} problem(s) in data" if len(problems) > 1 else "bad data"
        super().__init__(f"{head}:\n" + "\n".join(lines))
