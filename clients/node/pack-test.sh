#!/usr/bin/env bash
# Packs this library, installs the tarball into a clean temporary project that has the current
# ioredis and redis from the registry (the peer ranges must accept them), and takes a lock
# through each against a real server.
# Uses $REDIS_SERVER and $LOCK_MODULE like test.sh.
set -euo pipefail
cd "$(dirname "$0")"
REDIS_SERVER="${REDIS_SERVER:-redis-server}"
LOCK_MODULE="${LOCK_MODULE:-$(cd ../.. && pwd)/target/release/liblock.so}"
work=$(mktemp -d)
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
tarball=$(npm pack --silent --pack-destination "$work")
mkdir "$work/app"
cd "$work/app"
npm init -y >/dev/null
# A project that has the current clients already, then the library: npm checks the peer ranges
# against what is installed (ERESOLVE when they exclude it).
npm install --no-audit --no-fund ioredis redis
npm install --no-audit --no-fund "$work/$tarball"
port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
"$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --loadmodule "$LOCK_MODULE" --logfile "$work/server.log" &
server_pid=$!
cat > smoke.js <<'JS'
const IORedis = require("ioredis");
const { createClient } = require("redis");
const { Session, ModuleRedlock } = require("redis-lock-client");
const port = Number(process.argv[2]);
async function ready() {
  for (let i = 0; i < 100; i++) {
    const c = new IORedis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    c.on("error", () => {});
    try { await c.connect(); await c.ping(); c.disconnect(); return; } catch { c.disconnect(); }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("no server");
}
(async () => {
  await ready();
  const io = new IORedis({ port });
  const nr = createClient({ socket: { port } });
  await nr.connect();
  for (const [name, client] of [["ioredis", io], ["redis", nr]]) {
    const session = await Session.open(client);
    const token = await session.using(`smoke:${name}`, async (_signal, hold) => hold.tokenString);
    const redlock = new ModuleRedlock([client]);
    const lock = await redlock.acquire([`smoke-rl:${name}`], 5000);
    await lock.release();
    await redlock.quit();
    await session.close();
    console.log(`${name} ${require(`${name}/package.json`).version}: lock taken, token ${token}`);
  }
  io.disconnect();
  await nr.close();
})().catch((e) => { console.error(e); process.exit(1); });
JS
node smoke.js "$port"
