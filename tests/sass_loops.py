"""SASS loops for the CPU tests that count a kernel's inner-loop instructions (nvdisasm text of
``kernelgen.jit.sass.disassemble``)."""
import re


def shortest_loop(sass_text: str, opcode: str, count: int) -> list:
    """The instructions (opcode with its modifiers and operands, predicates dropped) of the shortest
    backward-branch loop body holding at least ``count`` instructions that contain ``opcode`` (say 12
    HGMMA for the Hopper kernel's key block, 32 HMMA for the decode tile's)."""
    lines = sass_text.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) for m in [re.match(r"^\.(L_x_\d+):", line)] if m}
    best = None
    for i, line in enumerate(lines):
        m = re.search(r"BRA `\(\.(L_x_\d+)\)", line)
        if m and labels.get(m.group(1), 1 << 30) < i:
            body = lines[labels[m.group(1)]:i + 1]
            if sum(opcode in x for x in body) >= count and (best is None or len(body) < len(best)):
                best = body
    assert best is not None, f"no loop with {count} {opcode} found"
    return [m.group(1).strip() for line in best
            for m in [re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_][^;]*);", line)] if m]
