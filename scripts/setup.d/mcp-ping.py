#!/usr/bin/env python3
"""Run an MCP server once over stdio: `initialize`, then `tools/list`, and check it lists
tools. Setup proves each installed server this way instead of trusting its files.
Usage: mcp-ping.py COMMAND [ARGS...]; prints the server's name and tool count."""
import json
import subprocess
import sys
import threading

proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
timer = threading.Timer(30, proc.kill)
timer.start()


def send(msg):
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def reply(want_id):
    for line in proc.stdout:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if msg.get("id") == want_id:
            if "error" in msg:
                sys.exit(f"{sys.argv[1]}: {msg['error']}")
            return msg["result"]
    err = proc.stderr.read().decode(errors="replace")[-400:]
    sys.exit(f"{sys.argv[1]}: no answer (exit {proc.wait()}): {err}")


try:
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "benchgen-setup", "version": "0"}}})
    info = reply(1)["serverInfo"]
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    tools = reply(2)["tools"]
    if not tools:
        sys.exit(f"{sys.argv[1]}: lists no tools")
    print(f"{info.get('name', '?')} ({len(tools)} tools)")
finally:
    timer.cancel()
    proc.kill()
