// A holder process for the kill -9 test: opens a session, takes a lock, says "held", waits.
// argv: <ioredis|node-redis|node-redis4> <port> <key> <leaseMs>
import { Session } from "../src";
import { connectClient, ClientKind } from "./helpers";

async function main(): Promise<void> {
  const [kind, port, key, lease] = process.argv.slice(2);
  const c = await connectClient(kind as ClientKind, Number(port));
  const session = await Session.open(c.client, { leaseMs: Number(lease) });
  await session.lock(key).acquire();
  process.stdout.write("held\n");
  setInterval(() => {}, 1 << 30);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
