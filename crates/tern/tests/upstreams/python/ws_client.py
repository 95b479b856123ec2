"""A WebSocket client for tern's proxy tests (Debian's python3-websockets;
run it with /usr/bin/python3).

usage: ws_client.py URL MESSAGE...

Connects, sends each MESSAGE and waits for its echo, then closes. A message
`binary:N` is sent as N bytes of the pattern byte(i % 251). Prints one line
per echo: the text, or `binary:N` when the N bytes came back intact. Exits 1
on anything else, or after 30 s.
"""

import asyncio
import sys

import websockets


async def main(url, messages):
    async with websockets.connect(url, max_size=None) as websocket:
        for message in messages:
            if message.startswith("binary:"):
                n = int(message[len("binary:"):])
                sent = bytes(i % 251 for i in range(n))
            else:
                sent = message
            await websocket.send(sent)
            echoed = await websocket.recv()
            if echoed != sent:
                sys.exit(f"echo of {message!r} differs: {echoed[:80]!r}")
            print(message, flush=True)


asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2:]), 30))
