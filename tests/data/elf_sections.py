"""Print the section names of each ELF shared object named (64-bit little-endian) as one JSON
line, {path: [names]}: the tests read debug info (.debug_*) out of an image's compiled
extensions with its own Python, no binutils needed. Usage: python3 elf_sections.py FILE..."""

import json
import struct
import sys


def section_names(path: str) -> list[str]:
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit(f"{path}: not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, ...]:  # sh_name, sh_type, sh_flags, sh_addr, sh_offset
        return struct.unpack_from("<IIQQQ", data, shoff + i * shentsize)

    strtab = header(shstrndx)[4]
    names = []
    for i in range(shnum):
        start = strtab + header(i)[0]
        names.append(data[start : data.index(b"\0", start)].decode())
    return names


if __name__ == "__main__":
    print(json.dumps({p: section_names(p) for p in sys.argv[1:]}))
