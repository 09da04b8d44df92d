"""Planted secrets never reach what `lkt` prints (issue 26).

One small base (module fixture) is built from two files holding secrets of every kind `output.redact` must hide: an
OpenAI `sk-…` key, a `Bearer …` token, a Hugging Face `hf_…` token, GitHub `ghp_…` tokens, AWS `AKIA…` key ids and a
secret access key, database URLs with a password, a private-key block, a JWT, a Slack token, and values that have no
shape at all but are named by the environment (`…_PASSWORD`, `.env`). Some are also set in the commands' environment
(GITHUB_TOKEN, DATABASE_URL, AWS_ACCESS_KEY_ID, …, and a `.env` in their working folder), the others are recognised by
their shape only. Every command that prints user data runs as its own process, plain and with `--json` (`--trace` where
it has one), and no planted value — nor a 12-character piece of one — may appear on stdout or stderr.

Commands that embed (ingest, search, answer, doctor) run `cli.main` in a fresh interpreter whose trainer embeds with the
`HashingEmbedder` test double (as nbs/24e_cli.ipynb does: no model to load); the others (stats, where, graph, parse) run
the installed `lkt` console script itself.
"""
import json, os, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LKT = Path(sys.executable).parent / "lkt"
HASHING = ("import local_knowledge_trainer.trainer as _t\nfrom local_knowledge_trainer.embeddings import HashingEmbedder\n"
           "_Real = _t.KnowledgeTrainer\n"
           "_t.KnowledgeTrainer = lambda *a, **kw: _Real(*a, **{**kw, 'embedding_model': HashingEmbedder(64), 'vector_store': 'numpy'})\n"
           "import sys\nfrom local_knowledge_trainer.cli import main\nsys.exit(main(sys.argv[1:]))")
KEY_LINES = ["MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi+v6x2V2i1bQ3ZqJvZmD1eAGrm",
             "T0Xb0Yk4oWjxsoB/8LqUr1cMAx5Kz7Jm7lPnGdQh1+QJ7l6lYcFZr3FbxTTWmU2C",
             "w8fAPhJgH8DpSo1yA8sQZk7ReVb0Lx3NmQa9Tc4Ud2Wf6Yh1Sj8Pk5Gn0Er7Bt"]
# recognised by their shape only (nothing in the environment names them)
SHAPED = {"openai key": "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMn",
          "bearer token": "eyJ0eXAiOiJKV1QiLCJhbGc1234abcd",
          "hugging face token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
          "github token": "ghp_a1B2c3D4e5F6a1B2c3D4e5F6a1B2c3D4e5F6",
          "aws key id": "AKIAIOSFODNN7EXAMPLE",
          "database password": "Sup3rS3cretPw",
          "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
          "slack token": "xoxb-123456789012-123456789012-abcdefghijklmnopqrstuvwx",
          **{f"private key line {i}": line for i, line in enumerate(KEY_LINES, 1)}}
# set in the commands' environment (and the .env file) as well as planted in the files
ENV = {"GITHUB_TOKEN": "ghp_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBaZy9X",
       "AWS_ACCESS_KEY_ID": "AKIAJ7Q3EXAMPLEZ2R4T",
       "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
       "DATABASE_URL": "postgres://app:Db-Passw0rd-7781@db.internal:5432/kb",
       "OPENAI_API_KEY": "sk-live-9f8e7d6c5b4a39281706",
       "HF_TOKEN": "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432",
       "ACME_SERVICE_PASSWORD": "correct horse battery staple"}   # no shape at all: only its name says it is secret
DOTENV = {"ACME_WEBHOOK_SECRET": "lisbon-tram-28-yellow"}          # the .env file of the working folder
KNOWN = {**{k: v for k, v in ENV.items() if k != "DATABASE_URL"}, "DATABASE_URL password": "Db-Passw0rd-7781", **DOTENV}
PLANTED = {**SHAPED, **KNOWN}

OPS = f"""# Acme operations notes

Acme Corporation runs its search service in Lisbon. The deploy key of Acme is {SHAPED["openai key"]} and lives in Vault.

Maria Silva rotates the GitHub token {SHAPED["github token"]} every month; the CI token of Acme is {ENV["GITHUB_TOKEN"]}.

The billing database of Acme is postgres://acme:{SHAPED["database password"]}@db.internal:5432/billing, the reports
database is {ENV["DATABASE_URL"]}, and its password Db-Passw0rd-7781 is also written alone here.

The operator account of Acme has the password {ENV["ACME_SERVICE_PASSWORD"]} and the webhook secret {DOTENV["ACME_WEBHOOK_SECRET"]}.

The Slack bot of Acme posts with {SHAPED["slack token"]} into the alerts channel.
"""
KEYS = f"""Amazon Web Services access for Acme uses the key id {SHAPED["aws key id"]} in region eu-west-1, and the
deploy role uses {ENV["AWS_ACCESS_KEY_ID"]} with the secret access key {ENV["AWS_SECRET_ACCESS_KEY"]}.

The API gateway of Acme expects the header Authorization: Bearer {SHAPED["bearer token"]} from every client, and the
session cookie of Acme holds {SHAPED["jwt"]} for an hour.

John Smith keeps the Hugging Face token {SHAPED["hugging face token"]} for Acme models; the OpenAI key of Acme is
{ENV["OPENAI_API_KEY"]} and the shared Hugging Face token is {ENV["HF_TOKEN"]}.

The signing key of Acme:

-----BEGIN RSA PRIVATE KEY-----
{chr(10).join(KEY_LINES)}
-----END RSA PRIVATE KEY-----
"""
QUESTION = f"Which deploy key does Acme use, is it {SHAPED['openai key']}?"   # a question can carry a secret too: it is echoed
SEARCH = ["--persist", "kb", "--k", "10", "--no-confidence"]
# (label, argv, run with the hashing embedder?) — ingest first: it builds the base the others read
COMMANDS = [
    ("ingest", ["ingest", "docs", "--persist", "kb", "--graph", "--chunk-size", "80", "--chunk-overlap", "0"], True),
    ("ingest --json", ["ingest", "docs", "--persist", "kb", "--json"], True),
    ("search", ["search", QUESTION, *SEARCH], True),
    ("search --json --trace", ["search", QUESTION, *SEARCH, "--json", "--trace"], True),
    ("search --mode text --json", ["search", "Acme token key password", *SEARCH, "--mode", "text", "--json"], True),
    ("answer", ["answer", QUESTION, *SEARCH], True),
    ("answer --json --trace", ["answer", QUESTION, *SEARCH, "--json", "--trace"], True),
    ("stats", ["stats", "--persist", "kb"], False),
    ("stats --json", ["stats", "--persist", "kb", "--json"], False),
    ("doctor", ["doctor", "--persist", "kb"], True),
    ("doctor --json", ["doctor", "--persist", "kb", "--json"], True),
    ("graph", ["graph", "Acme", "--persist", "kb", "--limit", "100"], False),
    ("graph --json", ["graph", "Acme", "--persist", "kb", "--limit", "100", "--json"], False),
    ("parse", ["parse", "docs"], False),
    ("parse --json", ["parse", "docs", "--json"], False),
    ("where", ["where", "--persist", "kb"], False),
    ("where --json", ["where", "--persist", "kb", "--json"], False),
    ("check", ["check", "The deploy key of Acme lives in Vault.", "--persist", "kb"], True),   # quotes the evidence
]
# commands whose output shows the planted text: a test that printed nothing would pass for the wrong reason
SHOWS_TEXT = {"search --json --trace", "search --mode text --json", "answer", "answer --json --trace", "graph", "graph --json",
              "check"}


class Runs:
    "The commands of COMMANDS in the project folder, each run once, in order, on first use."
    def __init__(self, proj:Path): self.proj, self.done = proj, {}

    def env(self)->dict:
        e = {k: v for k, v in os.environ.items() if k != "LKT_PERSIST"}
        return {**e, **ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

    def __call__(self, label:str)->subprocess.CompletedProcess:
        for lab, argv, hashing in COMMANDS:
            if lab in self.done: continue
            cmd = [sys.executable, "-c", HASHING, *argv] if hashing else [str(LKT), *argv]
            self.done[lab] = subprocess.run(cmd, cwd=self.proj, env=self.env(), capture_output=True, text=True, timeout=600)
            if lab == label: break
        return self.done[label]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if not LKT.exists(): pytest.skip(f"no console script at {LKT} (pip install -e .)")
    proj = tmp_path_factory.mktemp("secrets")
    (proj / "docs").mkdir()
    (proj / "docs" / "ops.md").write_text(OPS, encoding="utf-8")
    (proj / "docs" / "keys.txt").write_text(KEYS, encoding="utf-8")
    (proj / ".env").write_text("".join(f"{k}={v}\n" for k, v in DOTENV.items()), encoding="utf-8")
    return Runs(proj)


def leaks(text:str)->list:
    "The planted secrets (by kind) that `text` shows whole or by a 12-character piece."
    out = []
    for kind, v in PLANTED.items():
        pieces = {v} | {v[i:i + 12] for i in range(0, max(1, len(v) - 11), 4)}
        if any(p in text for p in pieces): out.append(kind)
    return out


def test_planted_corpus_holds_every_secret():
    "The corpus really carries each planted value (the test below would be empty otherwise)."
    assert [k for k, v in PLANTED.items() if v not in OPS + KEYS] == []


@pytest.mark.parametrize("label", [c[0] for c in COMMANDS])
def test_no_secret_in_output(runs, label):
    "The command succeeds and neither stdout nor stderr shows a planted secret, whole or in part."
    r = runs(label)
    assert r.returncode == 0, f"`lkt {label}` exited {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-3000:]}"
    assert leaks(r.stdout) == [], f"`lkt {label}` printed secrets on stdout:\n{r.stdout[-4000:]}"
    assert leaks(r.stderr) == [], f"`lkt {label}` printed secrets on stderr:\n{r.stderr[-4000:]}"
    if label.endswith(("--json", "--trace")): json.loads(r.stdout)   # redaction keeps the JSON valid
    if label in SHOWS_TEXT:
        assert "Acme" in r.stdout and "***REDACTED***" in r.stdout, f"`lkt {label}` shows no planted text:\n{r.stdout[-3000:]}"


def test_every_planted_kind_was_printed_redacted(runs):
    "Between them, the commands printed the sentence of every planted secret, with ***REDACTED*** where the secret was."
    shown = "\n".join(runs(lab).stdout for lab in SHOWS_TEXT)
    for around in ("lives in Vault", "every month", "db.internal:5432/billing", "webhook secret", "alerts channel",
                   "region eu-west-1", "from every client", "for an hour", "for Acme models", "Hugging Face token is"):
        assert around in shown, f"no command printed the passage around {around!r}"
    assert "BEGIN RSA PRIVATE KEY" not in shown.replace("***REDACTED***", ""), "a private key's BEGIN line was printed"
