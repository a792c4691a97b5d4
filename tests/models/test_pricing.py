"""The price table: how names match, the user's files over the packaged one, bad files, the arithmetic."""
from __future__ import annotations

import pytest

from insandbox.config import ConfigError
from insandbox.core.units import is_local
from insandbox.models.pricing import PACKAGED, load_prices, read_price_file


@pytest.fixture(autouse=True)
def no_user_files(tmp_path, monkeypatch):
    """The user's real ~/.config and environment never reach these tests."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INSANDBOX_PRICES", raising=False)


def _file(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_packaged_table_is_valid_dated_and_prices_the_common_models():
    parsed = read_price_file(PACKAGED)
    assert parsed.as_of and "may be out of date" in parsed.source
    table = load_prices()
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini", "o3", "o4-mini",
                  "claude-opus-4", "claude-sonnet-4", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-3-5-haiku",
                  "deepseek-chat", "kimi-k2", "minimax-m2"):
        price = table.price_of(model)
        assert price.match == "exact" and price.output > price.input > 0, model
        assert price.cache_read <= price.input and price.as_of == parsed.as_of and price.source == "packaged"


@pytest.mark.parametrize("model, entry, how", [
    ("gpt-4o", "gpt-4o", "exact"),
    ("GPT-4o", "gpt-4o", "exact"),
    ("openai/gpt-4o-2024-08-06", "gpt-4o", "exact"),  # provider prefix and date suffix
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini", "exact"),  # the longer entry, not gpt-4o
    ("anthropic/claude-sonnet-4-5-20250929", "claude-sonnet-4-5", "exact"),
    ("claude-sonnet-4.5", "claude-sonnet-4-5", "exact"),  # dots and dashes alike
    ("claude-sonnet-4-20250514", "claude-sonnet-4", "exact"),
    ("claude-opus-4-5@20251101", "claude-opus-4-5", "exact"),  # Vertex's date suffix
    ("claude-3-5-haiku-latest", "claude-3-5-haiku", "exact"),
    ("gpt-5-codex", "gpt-5", "prefix"),
    ("kimi-k2-turbo-preview", "kimi-k2-turbo", "prefix"),  # the longest prefix
    ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2", "prefix"),
])
def test_names_match_exactly_then_without_prefix_and_date_then_by_longest_prefix(model, entry, how):
    price = load_prices().price_of(model)
    assert (price.entry, price.match, price.model) == (entry, how, model)


@pytest.mark.parametrize("model", ["gpt-5.2", "gpt-4o1", "Qwen/Qwen3-8B", "m", "gpt", "claude"])
def test_a_name_no_entry_matches_has_an_unknown_price_never_zero(model):
    price = load_prices().price_of(model)
    assert price.match == "unknown" and not price.known and price.input is None
    assert price.cost(1000, 100) is None and "no price for" in price.describe()


def test_cost_counts_cached_and_cache_written_tokens_at_their_own_prices():
    price = load_prices().price_of("claude-sonnet-4-5")  # input 3, cache write 3.75, cache read 0.30, output 15
    # 10,000 prompt tokens of which 6,000 read from the cache and 2,000 written to it; 1,000 completion
    assert price.cost(10_000, 1_000, cached_tokens=6_000, cache_write_tokens=2_000) == pytest.approx(
        (2_000 * 3 + 6_000 * 0.30 + 2_000 * 3.75 + 1_000 * 15) / 1e6)
    assert price.cost(10_000, 1_000) == pytest.approx((10_000 * 3 + 1_000 * 15) / 1e6)
    assert price.cost(100, 0, cached_tokens=500) == pytest.approx(500 * 0.30 / 1e6)  # odd counts: no negative charge
    gpt = load_prices().price_of("gpt-4o")  # no cache_write price: written tokens are charged as input
    assert gpt.cache_write == gpt.input == 2.50 and gpt.cost(1_000_000, 0, cache_write_tokens=1_000_000) == 2.50


def test_the_users_files_override_the_packaged_table_in_order(tmp_path, monkeypatch):
    config = _file(tmp_path, "config.yaml", "prices:\n  gpt-4o: {input: 1, output: 2}\n  mine: {input: 3, output: 4}\n")
    (tmp_path / "config" / "insandbox").mkdir(parents=True)
    (tmp_path / "config" / "insandbox" / "prices.yaml").write_text(config.read_text())
    table = load_prices()
    assert table.price_of("gpt-4o").input == 1 and table.price_of("gpt-4o").cache_read == 1  # the whole entry
    assert table.price_of("gpt-4o-mini").input == 0.15  # the others stay
    env = _file(tmp_path, "env.yaml", "prices:\n  mine: {input: 5, output: 6}\n")
    monkeypatch.setenv("INSANDBOX_PRICES", str(env))
    flag = _file(tmp_path, "flag.yaml", "as_of: 2026-01-02\nprices:\n  MINE: {input: 7, output: 8}\n")
    assert load_prices().price_of("mine").input == 5
    price = load_prices(flag).price_of("mine")
    assert (price.input, price.output, price.source, price.as_of) == (7, 8, str(flag), "2026-01-02")


def test_glob_patterns_price_families_and_the_most_specific_wins(tmp_path):
    table = load_prices(_file(tmp_path, "p.yaml", "prices:\n  'my-ft-*': {input: 1, output: 1}\n"
                                                  "  'my-ft-big-*': {input: 9, output: 9}\n"
                                                  "  'gpt-4o-*': {input: 4, output: 4}\n"))
    assert table.price_of("org/my-ft-small-v2").input == 1
    assert table.price_of("my-ft-big-v1").input == 9
    assert table.price_of("gpt-4o-mini").input == 0.15  # an exact name beats a pattern
    price = table.price_of("gpt-4o-audio-preview")  # a pattern beats a prefix
    assert (price.input, price.match, price.entry) == (4, "pattern", "gpt-4o-*")


def test_a_model_served_on_this_machine_costs_nothing_unless_the_user_prices_it(tmp_path):
    price = load_prices().price_of("gpt-4o", local=True)  # e.g. a local server that calls itself gpt-4o
    assert price.match == "local" and price.cost(10_000, 1_000) == 0.0
    assert price.describe() == "served on this machine: $0"
    proxy = load_prices(_file(tmp_path, "p.yaml", "prices:\n  gpt-4o: {input: 2.5, output: 10}\n"))
    assert proxy.price_of("gpt-4o", local=True).cost(1_000_000, 0) == 2.5  # e.g. a LiteLLM proxy on localhost
    for url in ("embedded", "http://localhost:8000/v1", "http://127.0.0.2:1/v1", "http://[::1]:8000/v1",
                "http://0.0.0.0:8080/v1", "http://vllm.localhost/v1"):
        assert is_local(url), url
    for url in ("https://api.openai.com/v1", "http://10.0.0.5:8000/v1", "http://localhost.example.com/v1", None):
        assert not is_local(url), url


@pytest.mark.parametrize("text, says", [
    ("prices:\n  good: {input: 1, output: 2}\n  bad-one: {input: 1}\n", "prices.bad-one.output: Field required"),
    ("prices:\n  neg: {input: -1, output: 2}\n", "prices.neg.input: Input should be greater than or equal to 0"),
    ("prices:\n  typo: {input: 1, ouput: 2}\n", "prices.typo.ouput: unknown key (known: input, output,"),
    ("prices:\n  txt: {input: cheap, output: 2}\n", "prices.txt.input: Input should be a valid number"),
    ("gpt-4o: {input: 1, output: 2}\n", "gpt-4o: unknown key (known: source, as_of, note, prices)"),
    ("- gpt-4o\n", "a price file is a mapping"),
    ("prices: {a: [1, 2\n", "not valid YAML"),
])
def test_a_bad_price_file_is_a_clear_error_naming_the_file_and_the_entry(tmp_path, text, says):
    path = _file(tmp_path, "prices.yaml", text)
    with pytest.raises(ConfigError) as e:
        load_prices(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value), str(e.value)


def test_a_missing_price_file_names_where_it_was_given(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"^--prices .*nope\.yaml: no such file"):
        load_prices(tmp_path / "nope.yaml")
    monkeypatch.setenv("INSANDBOX_PRICES", str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError, match=r"^INSANDBOX_PRICES .*gone\.yaml: no such file"):
        load_prices()
