"""cuobjdump's SASS of a binary, library, object file or cubin, per kernel (the tools/sass_*.py scripts)."""
import re
import subprocess


def read_kernels(path, tool="cuobjdump"):
    """{(arch, mangled name): [(address, instruction without its trailing ';'), ...]} in address order."""
    sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
    kernels, key, arch = {}, None, "cubin"
    for line in sass.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.search(r"Function : (\S+)", line)
        if m:
            key = (arch, m.group(1))
            kernels[key] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+([^;]*);", line)
        if key and m:
            kernels[key].append((int(m.group(1), 16), m.group(2).strip()))
    return kernels


def opcode(instruction):
    """The opcode with its modifiers, without a guard predicate: '@!P0 LDG.E.128 R4, ...' -> 'LDG.E.128'."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0]
