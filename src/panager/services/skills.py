"""Skills: instruction files in `$PANAGER_HOME/skills/<name>/SKILL.md`.

`/skill NAME` adds a skill's name to the user's `loaded_skills` (checkpointed
state); while loaded, its text is part of the system prompt. A skill is capped
at 4 KB (the user is told when a file was cut). Names are plain directory
names: anything that looks like a path (`../x`, `a/b`) is refused, and a
symlink that resolves outside the skills directory is refused too.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 4_096
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TRUNCATED_NOTE = "\n[skill truncated at 4 KB]"


class SkillError(ValueError):
    """A skill that cannot be loaded; the message is safe to show the user."""


@dataclass(frozen=True)
class Skill:
    """An installed skill."""

    name: str
    description: str
    size: int  # bytes of SKILL.md


@dataclass(frozen=True)
class SkillText:
    """A skill's text as it goes into the prompt."""

    name: str
    text: str
    size: int
    truncated: bool


def _description(text: str) -> str:
    """The front matter's `description:`, else the first line that is not a heading."""
    for line in text.splitlines():
        match = re.match(r"^description:\s*(.+)$", line.strip())
        if match:
            return match.group(1).strip().strip("\"'")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "---")) and ":" not in line[:20]:
            return line[:100]
    return ""


class SkillLibrary:
    """The skills directory of this instance."""

    def __init__(self, root: Path, *, enabled: bool = True) -> None:
        self.root = root
        self.enabled = enabled
        self._cache: dict[Path, tuple[float, SkillText]] = {}

    def path(self, name: str) -> Path:
        """The SKILL.md of `name`; SkillError for path-like names or escaping symlinks."""
        if not NAME_RE.match(name) or ".." in name:
            raise SkillError(
                f"Refused skill name {name!r}: use the skill's folder name "
                "(letters, digits, '-', '_', '.'), not a path."
            )
        path = self.root / name / SKILL_FILE
        try:
            inside = path.resolve().is_relative_to(self.root.resolve())
        except OSError:
            inside = False
        if not inside:
            raise SkillError(f"Refused skill {name!r}: it points outside the skills folder.")
        return path

    def list(self) -> list[Skill]:
        """Installed skills, by name."""
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            if not NAME_RE.match(folder.name):
                continue
            try:
                path = self.path(folder.name)
                if path.is_file():
                    head = path.read_bytes()[:MAX_SKILL_BYTES].decode("utf-8", "ignore")
                    found.append(Skill(folder.name, _description(head), path.stat().st_size))
            except (SkillError, OSError):
                continue
        return found

    def read(self, name: str) -> SkillText:
        """The prompt text of a skill (≤ 4 KB); SkillError when missing or refused."""
        path = self.path(name)
        try:
            stat = path.stat()
        except OSError:
            raise SkillError(f"No skill named {name!r}.") from None
        cached = self._cache.get(path)
        if cached and cached[0] == stat.st_mtime:
            return cached[1]
        raw = path.read_bytes()
        truncated = len(raw) > MAX_SKILL_BYTES
        text = raw[:MAX_SKILL_BYTES].decode("utf-8", "ignore").strip()
        skill = SkillText(name, text, len(raw), truncated)
        self._cache[path] = (stat.st_mtime, skill)
        return skill

    # `list` here would mean the method above, so the builtin is spelled out.
    def prompt_sections(self, names: Sequence[str]) -> builtins.list[str]:
        """System-prompt sections for the loaded skills (missing ones skipped)."""
        if not self.enabled:
            return []
        sections = []
        for name in names:
            try:
                skill = self.read(name)
            except (SkillError, OSError):
                continue
            note = TRUNCATED_NOTE if skill.truncated else ""
            sections.append(f"## Skill: {skill.name}\n{skill.text}{note}")
        return sections
