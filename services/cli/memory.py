"""What each fleet member holds in memory: the proportional set size (PSS) of its process tree, from /proc.

PSS counts a page shared by N processes as 1/N in each, so members' figures add up to what the fleet takes: RSS would
count the shared libraries, and the pages a forked child still shares with its parent, once per process. A member's
figure includes its children (asr's interim process, the brain after its exec is the process itself).
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def children_by_parent(proc: Path = PROC) -> dict[int, list[int]]:
    """Every live process's children, from the parent pid in /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it exited while we looked
        # The command name (field 2) is in parentheses and may hold spaces; the parent pid follows the state.
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree(pid: int, children: dict[int, list[int]]) -> list[int]:
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    return tree


def pss_bytes(pid: int, proc: Path = PROC) -> int:
    """PSS of one process (/proc/<pid>/smaps_rollup; 0 when it has exited or cannot be read)."""
    try:
        text = (proc / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024  # kB
    return 0


def member_pss(pids: dict[str, int | None], proc: Path = PROC) -> dict[str, int | None]:
    """Member name -> PSS of its process and all its descendants (None for a member with no running process)."""
    children = children_by_parent(proc)
    return {
        name: None if not pid else sum(pss_bytes(p, proc) for p in process_tree(pid, children))
        for name, pid in pids.items()
    }
