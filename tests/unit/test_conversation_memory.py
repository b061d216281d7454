"""Conversation memory (DESIGN.md §10): summary lines that name their sources and
are dropped, live, when the user can no longer read them; notes that are the user's alone, labelled
as the user's words and never sources; deleting a conversation deletes what was derived from it.

The catalog is the real one (SQLite) over documents ingested with the hash embedder, so revoking is
the catalog's own `set_acl`, `withdraw` or a new version.
"""

from __future__ import annotations

import itertools

import pytest

from citadel.agent.memory import ConversationMemory, requested_notes, source_refs
from citadel.config import AgentConfig
from citadel.errors import NotFound
from citadel.ingest.sources import AclSpec, discover
from citadel.prompting.prompt import NOTES_HEADER, SOURCES, PromptAssembler
from citadel.prompting.source import Source
from citadel.state.conversations import FROM_USER, Conversation, MemoryConversationStore, SourceRef
from citadel.types import Passage, Principal

U1 = Principal("t", "u1", frozenset({"staff"}))
U2 = Principal("t", "u2", frozenset({"staff"}))
TRAVEL = """# Travel policy

## Per diem

The per diem for meals is $75 per day in domestic cities.
"""
LAPTOPS = """# Laptop policy

## Lost equipment

Report a lost or stolen laptop to security within 24 hours.
"""
ANSWER_1 = ("The per diem for meals is $75 per day [1]. Report a lost laptop within 24 hours [2]. "
            "Both rules apply to staff [1][2].")


class Home:
    """A tenant with two documents readable by `staff`, a conversation store and the memory."""

    def __init__(self, runtime, corpus, keep_turns: int = 2):
        self.runtime, self.corpus = runtime, corpus
        self.catalog = runtime.catalog
        ticks = itertools.count(1)
        self.store = MemoryConversationStore(lambda: float(next(ticks)))
        self.memory = ConversationMemory(self.store, self.catalog, AgentConfig(summarize_after_turns=keep_turns))
        self.ingest()
        readable = self.catalog.readable_documents(U1)
        self.travel = next(SourceRef(d, r.version) for d, r in readable.items() if "travel" in d)
        self.laptops = next(SourceRef(d, r.version) for d, r in readable.items() if "laptop" in d)

    def ingest(self) -> None:
        self.runtime.ingestor().ingest("t", discover([self.corpus]), AclSpec.from_groups(["staff"]))

    def conversation(self, principal: Principal = U1, conversation_id: str = "c1") -> str:
        self.store.create(Conversation(conversation_id, principal.tenant_id, principal.user_id))
        return conversation_id

    def three_turns(self, conversation_id: str = "c1") -> None:
        """Turn 1 cites travel [1] and laptops [2]; turns 2 and 3 cite travel only."""
        self.memory.record_turn(conversation_id, U1, "What is the per diem, and what if I lose my laptop?", ANSWER_1,
                                [self.travel, self.laptops])
        self.memory.record_turn(conversation_id, U1, "Is it per day?", "Yes, $75 per day [1].", [self.travel])
        self.memory.record_turn(conversation_id, U1, "Domestic only?", "Domestic cities [1].", [self.travel])


@pytest.fixture
def home(make_runtime, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "travel.md").write_text(TRAVEL)
    (corpus / "laptops.md").write_text(LAPTOPS)
    return Home(make_runtime(), corpus)


def texts(context) -> str:
    return "\n".join(item.text for item in context.conversation_items())


# ----------------------------------------------------------------------------- summary lines


def test_older_turns_become_lines_that_each_name_their_source(home):
    home.three_turns(home.conversation())
    lines, through = home.store.summary("c1")
    assert through == 2, "turn 1 (messages 1 and 2) is folded; the last two turns stay verbatim"
    by_source = {line.source: line.text for line in lines}
    assert by_source[home.travel] == "The per diem for meals is $75 per day. Both rules apply to staff."
    assert by_source[home.laptops] == "Report a lost laptop within 24 hours. Both rules apply to staff."
    assert by_source[None].startswith("What is the per diem"), "the user's own question, sourced to the user"
    context = home.memory.context("c1", U1)
    assert [m.seq for m in context.turns] == [3, 4, 5, 6] and context.withheld == 0
    rendered = texts(context)
    assert 'Earlier answer (from "Travel policy" version 1): The per diem for meals is $75 per day.' in rendered
    assert 'Earlier answer (from "Laptop policy" version 1): Report a lost laptop' in rendered
    assert "Earlier the user asked: What is the per diem" in rendered
    assert "Assistant: Yes, $75 per day. (from \"Travel policy\" version 1)" in rendered, "old markers removed"
    assert "[1]" not in rendered and "[2]" not in rendered


def test_turns_not_yet_folded_are_folded_on_the_fly(home):
    conversation = home.conversation()
    home.three_turns(conversation)
    home.memory.record_question(conversation, U1, "One more?")  # answer not recorded yet (a run in flight)
    context = home.memory.context(conversation, U1)
    assert [m.seq for m in context.turns] == [5, 6, 7]
    assert any(line.text == "Is it per day?" for line in context.summary), "turn 2 is summarised already"


def test_a_line_whose_source_was_revoked_is_not_used_in_the_next_context(home):
    home.three_turns(home.conversation())
    home.catalog.set_acl("t", home.laptops.document_id, ["finance"], actor="test")
    context = home.memory.context("c1", U1)
    assert home.laptops not in {line.source for line in context.summary}
    assert "laptop within 24 hours" not in texts(context) and context.withheld == 1
    assert home.travel in {line.source for line in context.summary}
    prompt = PromptAssembler(lambda t: len(t.split()), AgentConfig().prompt_allowances, 32_000).assemble(
        "And now?", conversation=context.conversation_items())
    assert "24 hours" not in prompt.messages()[1]["content"], "a dropped line never reaches the prompt"

    home.catalog.withdraw("t", home.travel.document_id, actor="test")
    context = home.memory.context("c1", U1)
    assert {line.source for line in context.summary} == {None}, "only the user's own words are left"
    assert all(m.role == "user" for m in context.turns), "recent answers citing a withdrawn source go too"

    home.catalog.set_acl("t", home.laptops.document_id, ["staff"], actor="test")
    back = home.memory.context("c1", U1)
    assert home.laptops in {line.source for line in back.summary}, "dropped from the context, not the store"


def test_a_line_from_an_older_version_is_dropped(home):
    home.three_turns(home.conversation())
    (home.corpus / "travel.md").write_text(TRAVEL.replace("$75", "$80"))
    home.ingest()
    assert home.catalog.readable_documents(U1)[home.travel.document_id].version == home.travel.version + 1
    context = home.memory.context("c1", U1)
    assert home.travel not in {line.source for line in context.summary}
    assert "$75" not in texts(context), "neither the summary line nor the verbatim answers of version 1"
    assert home.laptops in {line.source for line in context.summary}


def test_a_user_with_fewer_groups_sees_fewer_lines(home):
    home.three_turns(home.conversation())
    home.catalog.set_acl("t", home.laptops.document_id, ["staff-it"], actor="test")
    it_staff = Principal("t", "u1", frozenset({"staff", "staff-it"}))
    assert home.laptops in {line.source for line in home.memory.context("c1", it_staff).summary}
    assert home.laptops not in {line.source for line in home.memory.context("c1", U1).summary}


# ----------------------------------------------------------------------------- notes


def test_requests_to_remember_are_recognised_in_the_users_words():
    assert requested_notes("remember that I manage the EMEA team") == ["I manage the EMEA team"]
    assert requested_notes("Please note: my cost center is 4410.") == ["My cost center is 4410."]
    assert requested_notes("Acme renews next month. Remember I manage EMEA.\nWho approves?") == ["I manage EMEA."]
    assert requested_notes("For future reference, we report in euros.") == ["We report in euros."]
    for not_a_request in ("Remember the old travel policy?", "Note the deadline is Friday.",
                          "Do you remember what I said?", "What is the per diem?", "Remember that I asked?",
                          "Please remember that my password is hunter2!", "Notebook rules: none.",
                          "for future reference we report in euros"):
        assert requested_notes(not_a_request) == [], not_a_request
    assert len(requested_notes(" ".join(f"Remember that I own region {n}." for n in range(10)))) == 3
    assert requested_notes("Remember that " + "x" * 1_000) == []


def test_a_remembered_note_is_the_users_alone_labelled_and_never_a_source(home):
    conversation = home.conversation()
    recorded = home.memory.record_question(conversation, U1, "Remember that I manage the EMEA team. Who approves?")
    assert [n.text for n in recorded.notes] == ["I manage the EMEA team."]
    stored = home.store.memories("t", "u1")
    assert len(stored) == 1 and stored[0].origin == FROM_USER and stored[0].conversation_id == conversation
    home.memory.record_question(conversation, U1, "Remember that I manage the EMEA team.")  # said again
    assert len(home.store.memories("t", "u1")) == 1, "a note is stored once per conversation"

    other = home.conversation(U2, "c2")
    assert home.memory.context(other, U2).notes == (), "another user never sees it"
    assert home.store.memories("t", "u2") == []
    home.conversation(U1, "c3")
    context = home.memory.context("c3", U1)
    assert [n.text for n in context.notes] == ["I manage the EMEA team."], "the user's own, in any conversation"
    assert [i.text for i in context.note_items()] == ["The user said: I manage the EMEA team."]

    passage = Passage("t:travel:v1:0000", "Trips need approval.", home.travel.document_id, "Travel policy",
                      home.travel.version, "Travel policy > Approval", None, "travel.md", 1.0)
    prompt = PromptAssembler(lambda t: len(t.split()), AgentConfig().prompt_allowances, 32_000).assemble(
        "Who approves my trips?", [Source(1, passage, passage.text, 3)], notes=context.note_items())
    notes = prompt.part("notes").text
    assert notes.startswith(NOTES_HEADER) and "never cite them" in notes and "EMEA" in notes
    assert "EMEA" not in prompt.part(SOURCES).text and all(isinstance(s, Source) for s in prompt.sources)
    assert [s.number for s in prompt.sources] == [1], "a note is never a numbered source"
    assert "never cite them" in prompt.messages()[0]["content"], "the system text says so too"


def test_sensitive_data_is_never_remembered(home):
    conversation = home.conversation()
    recorded = home.memory.record_question(conversation, U1, "Remember that my card is 4111 1111 1111 1111.")
    assert recorded.notes == () and home.store.memories("t", "u1") == []
    assert home.memory.remember(conversation, U1, "my password is Hunter2!") is None


# ----------------------------------------------------------------------------- scope and deletion


def test_another_users_conversation_is_not_found(home):
    conversation = home.conversation()
    for call in (lambda: home.memory.context(conversation, U2),
                 lambda: home.memory.record_question(conversation, U2, "hi"),
                 lambda: home.memory.record_answer(conversation, U2, "x", []),
                 lambda: home.memory.forget(conversation, U2),
                 lambda: home.memory.context("missing", U1)):
        with pytest.raises(NotFound):
            call()
    assert home.store.get(conversation) is not None


def test_deleting_a_conversation_deletes_what_was_derived_from_it(home):
    conversation = home.conversation()
    home.memory.record_question(conversation, U1, "Please note: I manage the EMEA team.")
    home.three_turns(conversation)
    assert home.store.summary(conversation)[0] and home.store.memories("t", "u1")
    assert home.memory.forget(conversation, U1) is True
    assert home.store.get(conversation) is None and home.store.messages(conversation) == []
    assert home.store.summary(conversation) == ([], 0) and home.store.memories("t", "u1") == []
    with pytest.raises(NotFound):
        home.memory.context(conversation, U1)
    assert home.memory.forget(conversation) is False


def test_citations_become_source_refs_in_marker_order():
    citations = [{"document_id": "b", "version": 2, "chunk_id": "t:b:v2:0001"}, {"document_id": "a", "version": 1}]
    assert source_refs(citations) == (SourceRef("b", 2), SourceRef("a", 1))
