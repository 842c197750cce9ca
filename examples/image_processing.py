"""Large payloads out of band: an image travels as a reference, not in the message.

An agent asks for thumbnails of images it holds in memory. Arguments over the
runtime's threshold (4 KB by default, the message size Spanner's queue
documents recommend) are stored in a payloads record in the same transaction
as the task; the queue message carries only a reference. The handler gets the
image as if it had travelled in the message; the finished task still shows its
arguments, and the payload is deleted with the task when retention prunes it
(7 days after it finished, by default). A small call stays inline.
"""

# expect: photo.png: 42727 bytes of arguments kept out of band; its message is
# expect: icon.png: arguments inline in the task record (no payload row)
# expect: thumbnails: photo.png 40x12, icon.png 2x2
# expect: the finished photo.png task still shows its arguments: 1 payload row
# expect: payload rows left once retention pruned the tasks: 0

from __future__ import annotations

import base64
import json
import sqlite3
import tempfile
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.ledger import Tables

THUMBNAILS: dict[str, str] = {}


class Image(BaseModel):
    name: str
    width: int
    height: int
    data_b64: str  # the pixels, base64: far over 4 KB for a real photo


@tool(queue="images")
def make_thumbnail(ctx: ToolContext, args: Image) -> dict[str, str]:
    pixels = base64.b64decode(args.data_b64)
    assert len(pixels) == args.width * args.height  # the handler sees every byte
    size = f"{args.width // 8}x{args.height // 8}"
    THUMBNAILS[args.name] = size
    return {"thumbnail": size}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "agentq.db"
        clock = FakeClock()
        rt = Runtime(f"sqlite:///{db}", tools=[make_thumbnail], clock=clock)
        pixels = bytes(range(256)) * 200
        photo = rt.enqueue_action("make_thumbnail", _image("photo.png", 320, 100, pixels))
        icon = rt.enqueue_action("make_thumbnail", _image("icon.png", 16, 16, pixels))
        assert photo.args_ref is not None
        conn = sqlite3.connect(db)  # what a reader of the raw queue sees
        messages = dict(conn.execute('SELECT task_id, payload FROM "images"').fetchall())
        conn.close()
        message = json.loads(messages[photo.task_id])
        assert "args" not in message and message["args_ref"] == photo.args_ref
        print(
            f"photo.png: {photo.args_ref['bytes']} bytes of arguments kept out of band; "
            f"its message is {len(messages[photo.task_id])} bytes, a reference"
        )
        if icon.args_ref is None and not rt.backend.read_records(Tables.PAYLOADS, [icon.task_id]):
            print("icon.png: arguments inline in the task record (no payload row)")
        rt.worker().drain()
        print(f"thumbnails: photo.png {THUMBNAILS['photo.png']}, icon.png {THUMBNAILS['icon.png']}")
        done = rt.task(photo.task_id)
        assert done.args["data_b64"] == _image("photo.png", 320, 100, pixels)["data_b64"]
        rows = rt.backend.list_records(Tables.PAYLOADS)
        print(f"the finished photo.png task still shows its arguments: {len(rows)} payload row")
        clock.advance(timedelta(days=8))  # past the default retention of 7 days
        rt.prune()
        left = rt.backend.list_records(Tables.PAYLOADS)
        print(f"payload rows left once retention pruned the tasks: {len(left)}")
        rt.close()


def _image(name: str, width: int, height: int, pixels: bytes) -> dict[str, object]:
    return {
        "name": name, "width": width, "height": height,
        "data_b64": base64.b64encode(pixels[: width * height]).decode(),
    }  # fmt: skip


if __name__ == "__main__":
    main()
