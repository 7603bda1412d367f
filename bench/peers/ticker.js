// The peer side of `bench/peers/peers.py`: the same object as mailbox-actors' BenchTicker
// (src/mailbox_actors/bench/actors.py), as a Durable Object with SQLite storage, for workerd and
// Miniflare alike.
//
//   GET /init?i=K&at=MS  opens ticker K (touches it once): its table, one row, one alarm at MS
//   GET /read?i=K        ticker K's {fired, last_ms}: how often its alarm ran, and when last
//
// Its alarm handler is one SQLite write, as BenchTicker's: the row's UPDATE (which also records
// Date.now() at the handler's start, for the lateness) and the alarm re-armed a day later, both
// committed together at the end of the event.
import { DurableObject } from "cloudflare:workers";

const REARM_MS = 86_400_000;

export class Ticker extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
  }

  init(at) {
    this.sql.exec("CREATE TABLE IF NOT EXISTS ticks (id INTEGER PRIMARY KEY CHECK (id = 1), "
                  + "fired INTEGER NOT NULL, last_ms INTEGER NOT NULL)");
    this.sql.exec("INSERT OR IGNORE INTO ticks (id, fired, last_ms) VALUES (1, 0, 0)");
    if (at > 0) this.ctx.storage.setAlarm(at);
    return { ok: true };
  }

  read() {
    this.init(0);
    const row = this.sql.exec("SELECT fired, last_ms FROM ticks WHERE id = 1").one();
    return { fired: row.fired, last_ms: row.last_ms };
  }

  async alarm() {
    const now = Date.now();
    this.sql.exec("UPDATE ticks SET fired = fired + 1, last_ms = ? WHERE id = 1", now);
    this.ctx.storage.setAlarm(now + REARM_MS);
  }
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const i = url.searchParams.get("i");
    if (i === null) return new Response("missing i\n", { status: 400 });
    const stub = env.TICKER.get(env.TICKER.idFromName(`tick-${i}`));
    if (url.pathname === "/init") {
      return Response.json(await stub.init(Number(url.searchParams.get("at") ?? 0)));
    }
    if (url.pathname === "/read") return Response.json(await stub.read());
    return new Response("not found\n", { status: 404 });
  },
};
