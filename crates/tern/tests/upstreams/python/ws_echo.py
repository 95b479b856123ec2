"""The WebSocket upstream of tern's proxy tests: echoes every message, text
or binary, with Debian's python3-websockets (run it with /usr/bin/python3).

Listens on 127.0.0.1:PORT (the first argument, else an ephemeral port) and
prints its port on stdout once it accepts connections.
"""

import asyncio
import sys

import websockets


async def echo(websocket, *_path):
    async for message in websocket:
        await websocket.send(message)


async def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    async with websockets.serve(echo, "127.0.0.1", port, max_size=None) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


asyncio.run(main())
