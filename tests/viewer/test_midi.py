"""The notes of a MIDI file, read by the viewer's own small parser."""
from __future__ import annotations

import struct

import pytest

from insandbox.viewer.midi import MidiError, read_notes


def _midi(events: bytes, division: int = 480) -> bytes:
    header = b"MThd" + struct.pack(">IHHH", 6, 0, 1, division)
    return header + b"MTrk" + struct.pack(">I", len(events)) + events


def test_notes_with_running_status_meta_events_and_a_note_off_as_velocity_zero():
    events = (b"\x00\xff\x51\x03\x07\xa1\x20"  # tempo (a meta event, stepped over)
              b"\x00\x90\x3c\x64"  # C4 on
              b"\x83\x60\x3c\x00"  # 480 ticks later, running status, velocity 0: C4 off
              b"\x00\x40\x50"  # E4 on (running status)
              b"\x81\x70\x80\x40\x00"  # 240 ticks later E4 off
              b"\x00\xff\x2f\x00")  # end of track
    division, notes, more = read_notes(_midi(events))
    assert division == 480 and not more
    assert [(n.name, n.start, n.duration, n.velocity, n.channel) for n in notes] == \
        [("C4", 0, 480, 100, 1), ("E4", 480, 240, 80, 1)]


def test_a_file_that_is_not_midi_is_a_clear_error():
    with pytest.raises(MidiError, match="not a Standard MIDI File"):
        read_notes(b"RIFF....WAVE")
    with pytest.raises(MidiError, match="no MTrk"):
        read_notes(b"MThd" + struct.pack(">IHHH", 6, 0, 1, 96) + b"XXXX")
