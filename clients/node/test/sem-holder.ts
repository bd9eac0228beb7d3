// A holder process for the semaphore kill test: opens a session, takes permits, says "held", waits.
// argv: <ioredis|node-redis|node-redis4> <port> <key> <leaseMs> <permits>
import { Session } from "../src";
import { connectClient, ClientKind } from "./helpers";

async function main(): Promise<void> {
  const [kind, port, key, lease, permits] = process.argv.slice(2);
  const c = await connectClient(kind as ClientKind, Number(port));
  const session = await Session.open(c.client, { leaseMs: Number(lease) });
  const p = await session.semaphore(key).acquire(Number(permits));
  process.stdout.write(`held ${p.owner}\n`);
  setInterval(() => {}, 1 << 30);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
