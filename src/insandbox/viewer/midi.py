"""The notes of a Standard MIDI File, for showing one as a table (browsers cannot play MIDI).

Only what a table needs is read: the header's time division, and per track the note-on/note-off pairs
(running status, meta and system-exclusive events are stepped over). A malformed file raises
MidiError with what was wrong."""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..core.errors import DataError

NAMES = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"]
DATA_BYTES = {0x80: 2, 0x90: 2, 0xA0: 2, 0xB0: 2, 0xC0: 1, 0xD0: 1, 0xE0: 2}


class MidiError(DataError):
    """Not a standard MIDI file this reader takes."""


@dataclass
class Note:
    track: int
    channel: int
    start: int  # ticks
    duration: int  # ticks (0 when the note was never released)
    pitch: int
    velocity: int

    @property
    def name(self) -> str:
        return f"{NAMES[self.pitch % 12]}{self.pitch // 12 - 1}"


def _varlen(data: bytes, i: int) -> tuple[int, int]:
    value = 0
    for _ in range(4):
        if i >= len(data):
            raise MidiError("a variable-length number runs past the end of its track")
        b = data[i]
        i += 1
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            return value, i
    raise MidiError("a variable-length number longer than 4 bytes")


def read_notes(data: bytes, limit: int = 500) -> tuple[int, list[Note], bool]:
    """(ticks per quarter note, the first `limit` notes by start time, whether there were more)."""
    if data[:4] != b"MThd" or len(data) < 14:
        raise MidiError("not a Standard MIDI File (no MThd header)")
    _fmt, ntracks, division = struct.unpack(">HHH", data[8:14])
    pos = 8 + struct.unpack(">I", data[4:8])[0]
    notes: list[Note] = []
    for track in range(ntracks):
        if data[pos:pos + 4] != b"MTrk":
            raise MidiError(f"track {track + 1}: no MTrk header")
        length = struct.unpack(">I", data[pos + 4:pos + 8])[0]
        notes += _track(data[pos + 8:pos + 8 + length], track + 1)
        pos += 8 + length
    notes.sort(key=lambda n: (n.start, n.track, n.pitch))
    return division, notes[:limit], len(notes) > limit


def _track(data: bytes, track: int) -> list[Note]:
    i, tick, status, out = 0, 0, 0, []
    sounding: dict[tuple[int, int], Note] = {}
    while i < len(data):
        delta, i = _varlen(data, i)
        tick += delta
        if i >= len(data):
            break
        if data[i] & 0x80:
            status = data[i]
            i += 1
        elif not status:
            raise MidiError(f"track {track}: data byte without a status")
        if status == 0xFF:  # meta event: type, length, data
            length, i = _varlen(data, i + 1)
            i += length
            status = 0
            continue
        if status in (0xF0, 0xF7):  # system exclusive
            length, i = _varlen(data, i)
            i += length
            status = 0
            continue
        kind, channel = status & 0xF0, status & 0x0F
        size = DATA_BYTES.get(kind)
        if size is None:
            raise MidiError(f"track {track}: unknown status byte {status:#x}")
        args = data[i:i + size]
        i += size
        if kind in (0x80, 0x90) and len(args) == 2:
            pitch, velocity = args
            held = sounding.pop((channel, pitch), None)
            if held is not None:
                held.duration = tick - held.start
            if kind == 0x90 and velocity > 0:
                note = Note(track, channel + 1, tick, 0, pitch, velocity)
                sounding[(channel, pitch)] = note
                out.append(note)
    return out
