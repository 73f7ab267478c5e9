#!/usr/bin/env python3
"""Write the seed corpora of the fuzz targets (fuzz/corpus/<target>/seed-*).

The `verify` seeds are every published test vector of every built-in provider
(providers/*.toml); `config` takes the built-in specs and the example
configurations; the others are requests and records written here. Re-running it
rewrites only the seed-* files; what the fuzzer added stays. The folders are the
unpacked corpora, which git ignores: `python3 fuzz/corpus.py unpack` first, then
this, then `python3 fuzz/corpus.py pack` (git keeps fuzz/corpus/<target>.tar.gz).
"""
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed-{name}").write_bytes(data)


def verify_seeds():
    for path in sorted((ROOT / "providers").glob("*.toml")):
        spec = tomllib.loads(path.read_text())
        for i, v in enumerate(spec.get("vectors", [])):
            headers = "".join(f"{k}: {val}\n" for k, val in v.get("headers", {}).items())
            now = str(v["now"]) if "now" in v else ""
            head = f"{spec['name']}\n{v['secret']}\n{v.get('url', '')}\n{now}\n{headers}"
            write("verify", f"{spec['name']}-{i}", head + "\n" + v.get("body", ""))


def verify_dict():
    """fuzz/verify.dict: each scheme's header shapes (names, prefixes, kv keys and
    separators, the places values are read from), for `-dict=` (libFuzzer)."""
    words = set()
    for path in sorted((ROOT / "providers").glob("*.toml")):
        spec = tomllib.loads(path.read_text())
        words.add(spec["name"])
        sig = spec.get("signature", {})
        for key in ("header", "prefix", "pair_separator", "kv_separator", "from", "content"):
            if sig.get(key):
                words.add(sig[key])
        for k in sig.get("signature_keys", []):
            words.add(k)
            words.add(k + sig.get("kv_separator", "="))
        for section in ("timestamp", "event"):
            for value in spec.get(section, {}).values():
                if isinstance(value, str):
                    words.add(value)
        for v in spec.get("vectors", []):
            for name in v.get("headers", {}):
                words.add(name + ": ")
    words |= {"\n\n", ": ", "sha256=", "v1,", "v0=", "t=", "json:/", "header:", "form:", "query:"}
    lines = []
    for w in sorted(words):
        escaped = "".join(
            c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "\\x%02x" % b
            for c in w
            for b in ([ord(c)] if ord(c) < 0x80 else list(c.encode()))
        )
        lines.append(f'"{escaped}"')
    (ROOT / "fuzz" / "verify.dict").write_text("\n".join(lines) + "\n")


def config_seeds():
    for path in sorted((ROOT / "providers").glob("*.toml")):
        write("config", f"spec-{path.stem}", path.read_bytes())
    for path in sorted((ROOT / "examples").glob("*.toml")):
        write("config", f"example-{path.stem}", path.read_bytes())
    for path in sorted((ROOT / "deploy").glob("*.toml")):
        write("config", f"deploy-{path.stem}", path.read_bytes())
    write("config", "routes", '''
[server]
max_body_bytes = 65536
body_read_timeout = "5s"

[forwarder]
retry_budget = "1h"
max_attempts = 8

[[sources]]
name = "shop"
provider = "stripe"
secret = "env:FUZZ_SECRET"
dedupe_ttl = "24h"

[[sources.routes]]
name = "billing"
destination = "http://127.0.0.1:9/billing"
rate_limit = "10/s"
filter = { event_types = ["invoice.*"], match = [{ pointer = "/data/object/amount", in = [1, 2] }] }
order = { by = "provider", block = true }

[[sources.routes]]
name = "audit"
destination = "http://127.0.0.1:9/audit"

[[sources]]
name = "custom"
provider = "hmac"
secret = "generic"
provider_options = { signature = { header = "X-Sig", encoding = "base64", content = "{timestamp}.{body}" }, timestamp = { from = "header:X-Ts", unit = "milliseconds", tolerance = "10m" } }
''')


def routing_seeds():
    write("routing", "stripe-invoice", '''event_type = "invoice.paid"
templates = ["json:/data/object/id", "{header:X-Key}-{json:/id}", "json:/amount"]
headers = [["X-Key", "k1"], ["Content-Type", "application/json"]]
[filter]
event_types = ["invoice.*", "charge.?"]
match = [{ pointer = "/data/object/amount", in = [100, 200] }, { pointer = "/livemode", equals = false }]
headers = [{ name = "content-type", prefix = "application/" }]

{"id":"evt_1","type":"invoice.paid","livemode":false,"amount":1e2,"data":{"object":{"id":"in_1","amount":100}}}''')
    write("routing", "array-pointers", '''templates = ["json:/0", "json:/1/a", "json:/items/01", "json:/a~1b/c~0d"]
[filter]
match = [{ pointer = "/0", exists = true }]

[{"a":"x"},{"a":"y","a":"z"}]''')
    write("routing", "form", '''templates = ["form:Body", "form:payload#/type", "query:x"]
[filter]
event_types = ["*"]

MessageSid=SM1&Body=hello+world%21&payload=%7B%22type%22%3A%22t%22%7D&empty=&x''')
    write("routing", "escapes", '''templates = ["json:/s", "json:/n", "json:/t"]

{"s":"a\\u00e9\\ud83d\\ude00\\"b","n":-0.5e-3,"t":true,"nul":null}''')


def http_seeds():
    seeds = {
        "ingest-hmac": "POST /ingest/hmac\ncontent-type: application/json\n{sign}\n\n"
        '{"id":"evt_1","type":"a.b","data":{"object":{"id":"o_1"}}}',
        "ingest-stripe": "POST /ingest/stripe\ncontent-type: application/json\n{sign}\n\n"
        '{"id":"evt_2","type":"thing.x","data":{"object":{"id":"o_2"}}}',
        "ingest-github": "POST /ingest/github\ncontent-type: application/json\nx-github-event: push\n{sign}\n\n"
        '{"ref":"refs/heads/main"}',
        "ingest-slack-challenge": "POST /ingest/slack\ncontent-type: application/json\n{sign}\n\n"
        '{"type":"url_verification","challenge":"abc"}',
        "ingest-twilio": "POST /ingest/twilio?tenant=1\ncontent-type: application/x-www-form-urlencoded\n{sign}\n\n"
        "MessageSid=SM1&Body=hi+there&From=%2B15551234567",
        "ingest-forged": "POST /ingest/stripe\ncontent-type: application/json\nstripe-signature: t=1700000000,v1=00\n\n{}",
        "ingest-unknown": "POST /ingest/nope\n\n{}",
        "admin-list": "GET /admin/entries?source=hmac&status=pending&since=2023-11-14T22:13:20%2B05:30&until=1700000000&limit=5&cursor=abc\nauthorization: Bearer {token}\n\n",
        "admin-entry": "GET /admin/entries/{entry}\nauthorization: Bearer {token}\n\n",
        "admin-replay": "POST /admin/entries/{entry}/replay\nauthorization: Bearer {token}\ncontent-type: application/json\n\n"
        '{"route":"all"}',
        "admin-discard": "POST /admin/entries/{entry}/discard\nauthorization: Bearer {token}\ncontent-type: application/json\n\n"
        '{"note":"why","route":"some"}',
        "admin-bulk": "POST /admin/replay\nauthorization: Bearer {token}\ncontent-type: application/json\n\n"
        '{"source":"hmac","status":"dead","since":"2023-01-01T00:00:00Z","limit":10}',
        "admin-dead": "GET /admin/dead-letters?source=hmac\nauthorization: Bearer {token}\n\n",
        "admin-pause": "POST /admin/sources/hmac/pause\nauthorization: Bearer {token}\ncontent-type: application/json\n\n"
        '{"route":"all"}',
        "admin-stats": "GET /admin/sources/hmac/stats\nauthorization: Bearer {token}\n\n",
        "admin-sources": "GET /admin/sources\nauthorization: Bearer {token}\n\n",
        "admin-audit": "GET /admin/audit?limit=3\nauthorization: Bearer {token}\n\n",
        "metrics": "GET /metrics\nauthorization: Bearer {token}\n\n",
        "console-home": "GET /console/\ncookie: {session}\n\n",
        "console-entries": "GET /console/entries?source=hmac&status=dead&q=evt\ncookie: {session}\n\n",
        "console-entry": "GET /console/entries/{entry}\ncookie: {session}\n\n",
        "console-replay": "POST /console/entries/{entry}/replay\ncookie: {session}\norigin: http://127.0.0.1:8081\n"
        "content-type: application/x-www-form-urlencoded\n\ncsrf={csrf}&route=all",
        "console-discard": "POST /console/entries/{entry}/discard\ncookie: {session}\norigin: http://127.0.0.1:8081\n"
        "content-type: application/x-www-form-urlencoded\n\ncsrf={csrf}&route=&note=n%C3%A9",
        "console-dead": "GET /console/dead-letters\ncookie: {session}\n\n",
        "console-sources": "GET /console/sources\ncookie: {session}\n\n",
        "console-login": "POST /console/login\norigin: http://127.0.0.1:8081\ncontent-type: application/x-www-form-urlencoded\n\n"
        "csrf={login-csrf}&token=wrong",
        "console-logout": "POST /console/logout\ncookie: {session}\norigin: http://127.0.0.1:8081\n"
        "content-type: application/x-www-form-urlencoded\n\ncsrf={csrf}",
        "console-asset": "GET /console/assets/console.css\n\n",
        "probes": "GET /readyz\n\n",
    }
    for name, data in seeds.items():
        write("http", name, data)


def stored_seeds():
    write("stored", "entry", "0190a000-0000-7000-8000-000000000001\nroutes=all,some\nall:status=delivered\n"
          "all:attempts=2\nsome:next=1700000000000\nsome:okey=o_1\nsome:oblock=1\n\n"
          '{"source":"hmac","event_id":"evt_1","event_type":"a.b","dedupe_key":"id:evt_1","received_at":1700000000000,'
          '"headers":[["content-type","application/json"]]}\n{"id":"evt_1"}')
    write("stored", "json-view", "x\n\n" + '{"a":[1,2,{"b":"c\\"d","e":[]}],"f":{},"g":-1.5e3,"h":"\\u00e9"}')
    write("stored", "headers", 'x\n\n[["content-type","text/plain"],["x-a",null,"/w=="]]')
    write("stored", "deep", "x\n\n" + "[" * 40 + "1" + "]" * 40)


if __name__ == "__main__":
    verify_seeds()
    verify_dict()
    config_seeds()
    routing_seeds()
    http_seeds()
    stored_seeds()
