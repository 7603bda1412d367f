# workerd's configuration for bench/peers/ticker.js: one worker, one SQLite-backed Durable Object
# namespace kept on local disk. peers.py starts it as
#   workerd serve workerd.capnp --socket-addr http=127.0.0.1:PORT --directory-path do-storage=DIR
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "main", worker = .ticker),
    (name = "do-storage", disk = (writable = true)),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:8788", http = (), service = "main") ],
);

const ticker :Workerd.Worker = (
  modules = [ (name = "ticker.js", esModule = embed "ticker.js") ],
  compatibilityDate = "2025-04-01",
  durableObjectNamespaces = [
    (className = "Ticker", uniqueKey = "mailbox-actors-peer-ticker", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "do-storage"),
  bindings = [ (name = "TICKER", durableObjectNamespace = "Ticker") ],
);
