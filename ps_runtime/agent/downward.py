"""Server → agent messages on the `/ws/agent/` socket (docs/protocol.md §1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ps_runtime.agent.fields import JsonObject, ProtocolError, as_int
from ps_runtime.agent.kinds import MessageKind

# Seqs one `ack` may name beyond its cumulative `seq`.
MAX_ALSO = 1000


@dataclass(frozen=True, slots=True)
class TasksChanged:
    """Server → agent: fetch the desired tasks and reconcile."""

    KIND: ClassVar[MessageKind] = MessageKind.TASKS_CHANGED

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.KIND.value}

    @classmethod
    def from_fields(cls, fields: JsonObject) -> TasksChanged:
        return cls()


@dataclass(frozen=True, slots=True)
class ErrorMessage:
    """Server → agent: a message, or one item of it, was refused, and why: `seq` is the
    message's sequence number, `field` the refused item's field (`points[3].step`; empty
    when the whole message was refused). The rest of the message was applied."""

    KIND: ClassVar[MessageKind] = MessageKind.ERROR
    message: str
    seq: int | None = None
    field: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "message": self.message,
            "seq": self.seq,
            "field": self.field,
        }

    @classmethod
    def from_fields(cls, fields: JsonObject) -> ErrorMessage:
        return cls(
            message=fields.optional_text("message") or "",
            seq=fields.optional_integer("seq", minimum=1),
            field=fields.optional_text("field") or "",
        )


@dataclass(frozen=True, slots=True)
class Ack:
    """Server → agent: every message of this connection up to `seq` was handled (applied,
    or refused with an error frame), and so were the ones numbered in `also` (handled
    ahead of earlier ones: a heartbeat or task status while metrics before it are still
    being stored); the agent may forget them."""

    KIND: ClassVar[MessageKind] = MessageKind.ACK
    seq: int
    also: tuple[int, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": self.KIND.value, "seq": self.seq}
        if self.also:
            wire["also"] = list(self.also)
        return wire

    @classmethod
    def from_fields(cls, fields: JsonObject) -> Ack:
        where = fields.at("also")
        also = fields.items("also")
        if len(also) > MAX_ALSO:
            raise ProtocolError(f"{where} must hold at most {MAX_ALSO} items", where)
        return cls(
            seq=fields.integer("seq", minimum=0),
            also=tuple(as_int(v, f"{where}[{i}]", minimum=1) for i, v in enumerate(also)),
        )
