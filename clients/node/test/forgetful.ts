// A process that forgets to close its session: opens a client and a session, takes a lock,
// waits for a lock another process holds until it is released, quits its own client, then
// returns from main without session.close(). It must exit by itself.
// argv: <client kind> <port> <key> <waitKey>
import { Session } from "../src";
import { connectClient, ClientKind } from "./helpers";

async function main(): Promise<void> {
  const [kind, port, key, waitKey] = process.argv.slice(2);
  const c = await connectClient(kind as ClientKind, Number(port));
  const session = await Session.open(c.client, { leaseMs: 1000 });
  await session.lock(key).acquire();
  // A wait in progress keeps the process alive: this one ends when the parent releases waitKey.
  process.stdout.write("waiting\n");
  await session.lock(waitKey).acquire();
  process.stdout.write("held\n");
  await c.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
