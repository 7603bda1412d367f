// Serves bench/peers/ticker.js with Miniflare (the same worker and SQLite-backed Durable Object as
// workerd.capnp), for peers.py:  node miniflare_serve.mjs PORT PERSIST_DIR
// Miniflare is resolved from NODE_PATH (the cache directory peers.py installs into). It stays up
// until it is sent SIGTERM.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(path.join(process.env.NODE_PATH ?? ".", "noop.js"));
const { Miniflare } = require("miniflare");
const [port, persist] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));

const mf = new Miniflare({
  host: "127.0.0.1",
  port: Number(port),
  modules: true,
  scriptPath: path.join(here, "ticker.js"),
  compatibilityDate: "2025-04-01",
  durableObjects: { TICKER: { className: "Ticker", useSQLite: true } },
  durableObjectsPersist: persist,
});
await mf.ready;
process.on("SIGTERM", async () => {
  await mf.dispose();
  process.exit(0);
});
