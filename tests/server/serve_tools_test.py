"""Tools, structured output and sampling fields on `chorus serve` (issue 41), driven by real clients
from PyPI on 127.0.0.1: the `openai` client (parallel tool calls whole and streamed, with each call's
index, id and name in its first delta; a named tool_choice; response_format json_schema, 208 answers
sampled at temperature 1 validated with `jsonschema`; an unsupported schema feature is a 400 naming
it; logprobs and top_logprobs whole and streamed, logit_bias, frequency_penalty, n whole and streamed, echo
with the prompt's logprobs checked against the sampling path) and the OpenAI Agents SDK (`openai-agents`), unchanged, running
a multi-agent workflow: a hand-off, an agent calling two tools in one turn, and an agent returning a
pydantic-typed structured output. Greedy decoding (temperature 0), so a run is repeatable.

Run: CHORUS_BIN=build/bin/chorus python3 tests/server/serve_tools_test.py  (ctest runs it: serve_tools)
"""
import asyncio
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import ROOT, DEFAULT_MODEL, ChorusServer  # noqa: E402

import openai  # noqa: E402

BIN = os.environ.get("CHORUS_BIN", os.path.join(ROOT, "build", "bin", "chorus"))
MODEL = os.environ.get("CHORUS_MODEL", DEFAULT_MODEL)
THREADS = os.environ.get("CHORUS_THREADS", "2")

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": CITY}},
         {"type": "function", "function": {"name": "get_time", "description": "The local time in a city",
                                           "parameters": CITY}}]
ASK = [{"role": "user", "content": "What is the weather in Paris and the time in Tokyo?"}]


class ServeTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = ChorusServer(BIN, MODEL, "-t", THREADS)
        cls.c = openai.OpenAI(base_url=cls.srv.url, api_key="-", max_retries=0, timeout=600)
        cls.model = cls.c.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def chat(self, **kw):
        return self.c.chat.completions.create(model=self.model, messages=kw.pop("messages", ASK), temperature=0,
                                              max_tokens=kw.pop("max_tokens", 120), **kw)

    def check_call(self, name, arguments):
        self.assertIn(name, {"get_weather", "get_time"})
        args = json.loads(arguments)  # valid JSON for the schema: the grammar made it so
        self.assertEqual(set(args), {"city"})
        self.assertIsInstance(args["city"], str)
        self.assertLessEqual(len(args["city"]), 24)

    def test_parallel_calls_whole_and_streamed_agree(self):
        r = self.chat(tools=TOOLS, tool_choice="required")
        ch = r.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls")
        self.assertIsNone(ch.message.content)
        calls = ch.message.tool_calls
        self.assertGreaterEqual(len(calls), 2)  # parallel calls, every one parsed
        self.assertEqual(len({c.id for c in calls}), len(calls))
        for c in calls:
            self.check_call(c.function.name, c.function.arguments)
        names = {c.function.name for c in calls}
        self.assertEqual(names, {"get_weather", "get_time"}, calls)
        # Streamed: the same calls; each call's first delta has its index, id and name, then arguments in pieces.
        seen, finish = {}, None
        for chunk in self.chat(tools=TOOLS, tool_choice="required", stream=True):
            d = chunk.choices[0].delta if chunk.choices else None
            finish = chunk.choices[0].finish_reason if chunk.choices else finish
            if d is None or not d.tool_calls:
                if d is not None and d.content:
                    self.fail(f"content leaked beside tool calls: {d.content!r}")
                continue
            for tc in d.tool_calls:
                if tc.index not in seen:
                    self.assertTrue(tc.id and tc.function.name, tc)
                    seen[tc.index] = {"name": tc.function.name, "arguments": ""}
                else:
                    self.assertIsNone(tc.id)
                seen[tc.index]["arguments"] += tc.function.arguments or ""
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(sorted(seen), list(range(len(calls))))
        self.assertEqual([seen[i]["name"] for i in range(len(calls))], [c.function.name for c in calls])
        self.assertEqual([seen[i]["arguments"] for i in range(len(calls))], [c.function.arguments for c in calls])

    def test_named_choice_and_tool_results_go_back_in(self):
        r = self.chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
        calls = r.choices[0].message.tool_calls
        self.assertEqual([c.function.name for c in calls], ["get_time"])
        self.check_call("get_time", calls[0].function.arguments)
        follow = ASK + [{"role": "assistant", "content": None,
                         "tool_calls": [{"id": calls[0].id, "type": "function",
                                         "function": {"name": "get_time", "arguments": calls[0].function.arguments}}]},
                        {"role": "tool", "tool_call_id": calls[0].id, "content": "10:30 in Tokyo"}]
        r2 = self.chat(messages=follow, tools=TOOLS, tool_choice="none", max_tokens=40)
        self.assertIsNone(r2.choices[0].message.tool_calls)
        self.assertTrue(r2.choices[0].message.content)
        alone = self.chat(tools=TOOLS, tool_choice="none", max_tokens=1)  # the question without the call
        self.assertGreater(r2.usage.prompt_tokens, alone.usage.prompt_tokens + 20)  # the call and its result

    def test_response_format_json_schema(self):
        schema = {"type": "object", "additionalProperties": False, "required": ["name", "country", "year"],
                  "properties": {"name": {"type": "string", "maxLength": 30},
                                 "country": {"type": "string", "maxLength": 30},
                                 "year": {"type": "integer", "minimum": 0, "maximum": 3000}}}
        r = self.chat(messages=[{"role": "user", "content": "Describe the city of Paris as JSON."}],
                      response_format={"type": "json_schema",
                                       "json_schema": {"name": "city", "strict": True, "schema": schema}})
        self.assertEqual(r.choices[0].finish_reason, "stop", r.choices[0].message.content)
        got = json.loads(r.choices[0].message.content)
        self.assertEqual(set(got), {"name", "country", "year"})
        self.assertIsInstance(got["year"], int)
        r = self.chat(messages=[{"role": "user", "content": "Reply with the JSON object {\"ok\": true}."}],
                      response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)

    def test_unsupported_schema_is_a_400_naming_it(self):
        for rf, word in [({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array",
                                                                                         "uniqueItems": True}}},
                          "uniqueItems"),
                         ({"type": "xml"}, "xml")]:
            with self.assertRaises(openai.BadRequestError) as e:
                self.chat(response_format=rf)
            self.assertIn(word, str(e.exception))
        bad_tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                                 "not": {"required": ["a"]}}}}]
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(tools=bad_tool, tool_choice="required")
        self.assertIn("'not'", str(e.exception))

    def test_json_schema_answers_validate_when_sampled(self):
        import jsonschema
        schema = {"type": "object", "additionalProperties": False, "required": ["name", "mood", "age", "tags"],
                  "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                                 "mood": {"enum": ["happy", "sad", "calm"]},
                                 "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                 "tags": {"type": "array", "maxItems": 3,
                                          "items": {"type": "string", "maxLength": 8}}}}
        answers = []
        for seed in range(13):  # 13 requests x n = 16: 208 answers sampled at temperature 1
            r = self.c.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "Invent a person as JSON."}], n=16,
                temperature=1.0, seed=seed, max_tokens=100,
                response_format={"type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": schema}})
            self.assertEqual(len(r.choices), 16)
            self.assertEqual(sorted(c.index for c in r.choices), list(range(16)))
            answers += [c.message.content for c in r.choices if c.finish_reason == "stop"]
        self.assertGreaterEqual(len(answers), 200)
        for a in answers:
            jsonschema.validate(json.loads(a), schema)
        print(f"  {len(answers)} sampled json_schema answers, all valid; {len(set(answers))} distinct")

    def test_logprobs_penalties_bias_and_echo(self):
        q = [{"role": "user", "content": "Name three colours."}]
        r = self.c.chat.completions.create(model=self.model, messages=q, temperature=0, max_tokens=8, logprobs=True,
                                           top_logprobs=3)
        lp = r.choices[0].logprobs.content
        self.assertEqual(len(lp), r.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in lp), r.choices[0].message.content)
        for t in lp:  # greedy: the token taken is the most likely one
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertAlmostEqual(t.logprob, t.top_logprobs[0].logprob, places=5)
            self.assertLessEqual(t.logprob, 0.0)
        streamed = []
        for chunk in self.c.chat.completions.create(model=self.model, messages=q, temperature=0, max_tokens=8,
                                                    logprobs=True, top_logprobs=3, stream=True):
            if chunk.choices and chunk.choices[0].logprobs:
                streamed += chunk.choices[0].logprobs.content
        self.assertEqual([(t.token, round(t.logprob, 4)) for t in streamed],
                         [(t.token, round(t.logprob, 4)) for t in lp])
        # logit_bias +100 on one token: every token is that one.
        word = self.c.completions.create(model=self.model, prompt="Hello", max_tokens=6, temperature=0, logprobs=1,
                                         logit_bias={"28": 100})
        self.assertEqual(len(set(word.choices[0].logprobs.tokens)), 1, word.choices[0].logprobs.tokens)
        # frequency_penalty breaks the loop the greedy answer falls into: its most repeated token repeats less.
        from collections import Counter
        rep = [{"role": "user", "content": "Write the word cat ten times."}]
        def most_repeated(**kw):
            r = self.chat(messages=rep, max_tokens=40, logprobs=True, **kw)
            return max(Counter(t.token for t in r.choices[0].logprobs.content).values())
        self.assertGreater(most_repeated(), most_repeated(frequency_penalty=2.0))
        # n greedy choices are the same answer; echo puts the prompt first.
        many = self.chat(messages=q, max_tokens=8, n=3)
        self.assertEqual(len({c.message.content for c in many.choices}), 1)
        self.assertEqual(many.usage.completion_tokens, 3 * r.usage.completion_tokens)
        e = self.c.completions.create(model=self.model, prompt="The capital of France is", max_tokens=3, echo=True,
                                      temperature=0)
        self.assertTrue(e.choices[0].text.startswith("The capital of France is"))
        with self.assertRaises(openai.BadRequestError) as err:
            self.chat(messages=q, n=17)
        self.assertIn("'n'", str(err.exception))
        with self.assertRaises(openai.BadRequestError) as err:
            self.chat(messages=q, logit_bias={"999999999": 5})
        self.assertIn("logit_bias", str(err.exception))

    def test_echo_logprobs_score_the_prompt(self):
        # What evaluation harnesses (lm-evaluation-harness) send: a prompt as token ids, echo, logprobs,
        # max_tokens 0 (score only) or 1. 40 ids: a full 32-token block and a tail.
        ids = [(504 + 97 * i) % 30000 + 100 for i in range(40)]
        whole = self.c.completions.create(model=self.model, prompt=ids, max_tokens=0, echo=True, logprobs=5)
        ch = whole.choices[0]
        lp = ch.logprobs
        self.assertEqual(ch.finish_reason, "length")
        self.assertEqual(whole.usage.completion_tokens, 0)
        self.assertEqual(whole.usage.prompt_tokens, len(ids))
        self.assertEqual(len(lp.tokens), len(ids))
        self.assertEqual(ch.text, "".join(lp.tokens))
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        at = 0
        for tok, off in zip(lp.tokens, lp.text_offset):
            self.assertEqual(off, at)
            at += len(tok)
        # Independently, the sampling path: each prefix as a request for one greedy token. Its top-5 are
        # the echoed alternatives at that position (same model, same KV formats): within 1e-4.
        worst = 0.0
        for k in range(1, len(ids)):
            g = self.c.completions.create(model=self.model, prompt=ids[:k], max_tokens=1, temperature=0, logprobs=5)
            want = g.choices[0].logprobs.top_logprobs[0]
            got = lp.top_logprobs[k]
            self.assertEqual(set(want), set(got), f"position {k}")
            worst = max([worst] + [abs(want[t] - got[t]) for t in want])
            if lp.tokens[k] in want:  # the prompt's own token among them: the same logprob
                self.assertAlmostEqual(lp.token_logprobs[k], want[lp.tokens[k]], delta=1e-4)
            self.assertLessEqual(lp.token_logprobs[k], max(got.values()) + 1e-6)
        self.assertLess(worst, 1e-4)
        print(f"  echo logprobs: {len(ids) - 1} positions, max |echo - sampled| top-5 logprob {worst:.2g}")
        # max_tokens 1, the prompt as a batch of one (lm-evaluation-harness's form with batch size 1): the
        # prompt's entries, then the generated token's.
        one = self.c.completions.create(model=self.model, prompt=[ids], max_tokens=1, echo=True, logprobs=5,
                                        temperature=0)
        o = one.choices[0].logprobs
        self.assertEqual(len(o.tokens), len(ids) + 1)
        self.assertEqual(o.tokens[:-1], lp.tokens)
        self.assertEqual(o.token_logprobs[:-1], lp.token_logprobs)
        self.assertEqual(o.text_offset[-1], len(ch.text))
        self.assertEqual(one.choices[0].text, ch.text + o.tokens[-1])
        # A text prompt: the text echoed as sent, every token's offset points at its text.
        prompt = "The capital of France is Paris."
        t = self.c.completions.create(model=self.model, prompt=prompt, max_tokens=0, echo=True, logprobs=0)
        tl = t.choices[0].logprobs
        self.assertEqual(t.choices[0].text, prompt)
        for tok, off in zip(tl.tokens, tl.text_offset):
            self.assertEqual(prompt[off:off + len(tok)], tok)
        self.assertTrue(all(x is not None and x <= 0 for x in tl.token_logprobs[1:]))
        # Streamed: the first chunk is the echoed prompt with its logprobs, then the answer.
        chunks = list(self.c.completions.create(model=self.model, prompt=ids, max_tokens=1, echo=True, logprobs=5,
                                                temperature=0, stream=True))
        first = chunks[0].choices[0]
        self.assertEqual(first.text, ch.text)
        self.assertEqual(first.logprobs.token_logprobs, lp.token_logprobs)
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), one.choices[0].text)
        # max_tokens 0 without echo is still a 400.
        with self.assertRaises(openai.BadRequestError) as err:
            self.c.completions.create(model=self.model, prompt=ids, max_tokens=0)
        self.assertIn("max_tokens", str(err.exception))

    def test_n_choices_streamed_equal_whole(self):
        # n > 1 streamed: each choice's deltas carry its index, chunks of different choices interleave,
        # each choice ends with its own finish_reason, and the reassembled choices equal the
        # non-streamed ones for the same seed (choice i samples with seed + i); usage counts all once.
        q = [{"role": "user", "content": "Tell me a short story about a cat."}]
        kw = dict(model=self.model, messages=q, temperature=1.0, seed=7, n=3, max_tokens=24, logprobs=True)
        whole = self.c.chat.completions.create(**kw)
        self.assertEqual(len({c.message.content for c in whole.choices}), 3)  # sampled: three answers
        text, lps, finish, order, usage = {}, {}, {}, [], None
        for chunk in self.c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                self.assertNotIn(c.index, finish, "a chunk after its choice finished")
                if c.delta.content:
                    text[c.index] = text.get(c.index, "") + c.delta.content
                    order.append(c.index)
                if c.logprobs:
                    lps.setdefault(c.index, []).extend(t.token for t in c.logprobs.content)
                if c.finish_reason:
                    finish[c.index] = c.finish_reason
        self.assertEqual(sorted(finish), [0, 1, 2])
        for c in whole.choices:
            self.assertEqual(text[c.index], c.message.content, c.index)
            self.assertEqual(finish[c.index], c.finish_reason, c.index)
            self.assertEqual(lps[c.index], [t.token for t in c.logprobs.content], c.index)
        self.assertNotEqual(order, sorted(order), "the choices' chunks should interleave")
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, whole.usage.prompt_tokens)
        # Completions, with a stop string that ends some choices early and echo first.
        kw = dict(model=self.model, prompt="Once upon a time", temperature=1.0, seed=11, n=4, max_tokens=20,
                  stop=["."], echo=True)
        whole = self.c.completions.create(**kw)
        text, finish = {}, {}
        for chunk in self.c.completions.create(stream=True, **kw):
            for c in chunk.choices:
                text[c.index] = text.get(c.index, "") + c.text
                if c.finish_reason:
                    finish[c.index] = c.finish_reason
        self.assertEqual({c.index: c.text for c in whole.choices}, text)
        self.assertEqual({c.index: c.finish_reason for c in whole.choices}, finish)
        # Tools: each choice streams its own calls (index per call, per choice).
        kw = dict(model=self.model, messages=ASK, temperature=0, n=2, max_tokens=120, tools=TOOLS,
                  tool_choice="required")
        whole = self.c.chat.completions.create(**kw)
        calls = {}
        for chunk in self.c.chat.completions.create(stream=True, **kw):
            for c in chunk.choices:
                for tc in c.delta.tool_calls or []:
                    got = calls.setdefault(c.index, {}).setdefault(tc.index, {"name": "", "arguments": ""})
                    got["name"] += tc.function.name or ""
                    got["arguments"] += tc.function.arguments or ""
        for c in whole.choices:
            self.assertEqual([(t.function.name, t.function.arguments) for t in c.message.tool_calls],
                             [(x["name"], x["arguments"]) for _, x in sorted(calls[c.index].items())])

    def test_responses_resume_prefills_only_the_new_input(self):
        import concurrent.futures as cf
        with open(os.path.join(ROOT, "examples", "du_fu.txt")) as f:
            doc = f.read()[:3000]
        r1 = self.c.responses.create(model=self.model, input=doc + "\n\nWhen was Du Fu born?",
                                     instructions="Answer briefly.", max_output_tokens=40, temperature=0)
        self.assertTrue(r1.id.startswith("resp_"))
        held = r1.usage.input_tokens + r1.usage.output_tokens

        def resume(q):
            return self.c.responses.create(model=self.model, input=q, previous_response_id=r1.id,
                                           max_output_tokens=16, temperature=0)

        with cf.ThreadPoolExecutor(2) as ex:  # two branches of one conversation at once
            a, b = ex.map(resume, ["And where?", "Who were his friends, and what did he write about?"])
        for r in (a, b):
            new = r.usage.input_tokens - held  # the new turn's tokens (the template's end of turn included)
            prefilled = r.usage.input_tokens - r.usage.input_tokens_details.cached_tokens
            self.assertGreater(new, 0)
            self.assertLessEqual(prefilled, new + 31)  # the new input, from the last partial block of the answer on
            self.assertEqual(r.previous_response_id, r1.id)
            print(f"  resume: {r.usage.input_tokens} input tokens, {new} new, {prefilled} prefilled")
        self.assertNotEqual(a.usage.input_tokens, b.usage.input_tokens)
        self.assertEqual(self.c.responses.retrieve(a.id).id, a.id)
        # Unknown, deleted and unstored ids are 404s that say so, never a fresh start.
        nostore = self.c.responses.create(model=self.model, input="Hi", store=False, max_output_tokens=4)
        self.c.responses.delete(b.id)
        for gone in ("resp_unknown", b.id, nostore.id):
            with self.assertRaises(openai.NotFoundError) as e:
                resume_gone = self.c.responses.create(model=self.model, input="x", previous_response_id=gone)
                del resume_gone
            self.assertIn(gone, str(e.exception))
        with self.assertRaises(openai.NotFoundError):
            self.c.responses.retrieve(b.id)

    def test_responses_stream_events(self):
        types, text = [], ""
        with self.c.responses.stream(model=self.model, input="Say hello in three words.", max_output_tokens=200,
                                     temperature=0) as s:
            for ev in s:
                types.append(ev.type)
                text += ev.delta if ev.type == "response.output_text.delta" else ""
            final = s.get_final_response()
        self.assertEqual(types[:4], ["response.created", "response.in_progress", "response.output_item.added",
                                     "response.content_part.added"])
        self.assertEqual(types[-4:], ["response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"])
        self.assertEqual(text, final.output_text)
        self.assertEqual(self.c.responses.retrieve(final.id).output_text, text)  # stored as streamed
        rtools = [{"type": "function", **t["function"]} for t in TOOLS]
        events = list(self.c.responses.create(model=self.model, input=ASK[0]["content"], tools=rtools,
                                              tool_choice="required", stream=True, max_output_tokens=120,
                                              temperature=0))
        done = events[-1].response
        calls = [o for o in done.output if o.type == "function_call"]
        self.assertGreaterEqual(len(calls), 2)
        for call in calls:
            self.check_call(call.name, call.arguments)
            deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta"
                             and e.item_id == call.id)
            self.assertEqual(deltas, call.arguments)  # the pieces reassemble into the call

    def test_agents_sdk_workflow_on_the_responses_api(self):
        from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
        set_tracing_disabled(True)
        calls = []

        @function_tool
        def get_weather(city: str) -> str:
            """The current weather in a city."""
            calls.append(city)
            return f"sunny in {city}"

        model = OpenAIResponsesModel(model=self.model, openai_client=openai.AsyncOpenAI(
            base_url=self.srv.url, api_key="-", max_retries=0, timeout=600))
        agent = Agent(name="weather", instructions="Use get_weather.", tools=[get_weather], model=model,
                      tool_use_behavior="stop_on_first_tool",
                      model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False,
                                                   temperature=0.0, max_tokens=60))
        async def both():  # one event loop: the client's connections belong to it
            whole = await Runner.run(agent, "Weather in Paris?", max_turns=3)
            run = Runner.run_streamed(agent, "Weather in Paris?", max_turns=3)  # response events
            async for _ in run.stream_events():
                pass
            return whole.final_output, run.final_output

        whole, streamed = asyncio.run(both())
        self.assertEqual(len(calls), 2, calls)
        self.assertEqual(whole, f"sunny in {calls[0]}")
        self.assertEqual(streamed, f"sunny in {calls[1]}")

    def test_embeddings_and_models(self):
        import math
        models = {m.id: m for m in self.c.models.list().data}
        self.assertEqual(models[self.model].model_extra["kv"]["policy"], "kivi4/tq3")
        self.assertGreater(models[self.model].model_extra["context_length"], 0)
        self.assertIn("all-MiniLM-L6-v2", models)  # scripts/fetch_encoder.sh installs it next to the model
        texts = ["Du Fu was a Tang dynasty poet.", "Li Bai wrote Chinese poems.", "The stock market fell today."]
        e = self.c.embeddings.create(model="all-MiniLM-L6-v2", input=texts, encoding_format="float")
        self.assertEqual([d.index for d in e.data], [0, 1, 2])
        v = [d.embedding for d in e.data]
        self.assertEqual({len(x) for x in v}, {384})
        for x in v:
            self.assertAlmostEqual(math.sqrt(sum(a * a for a in x)), 1.0, places=4)
        cos = lambda a, b: sum(x * y for x, y in zip(a, b))
        self.assertGreater(cos(v[0], v[1]), cos(v[0], v[2]) + 0.2)  # two poets are closer than a poet and stocks
        self.assertGreater(e.usage.prompt_tokens, 10)
        b64 = self.c.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0])  # the client asks for base64
        self.assertTrue(all(abs(a - b) < 1e-6 for a, b in zip(b64.data[0].embedding, v[0])))
        for bad in ([1, 2, 3], "", []):
            with self.assertRaises(openai.BadRequestError):
                self.c.embeddings.create(model="all-MiniLM-L6-v2", input=bad, encoding_format="float")
        with self.assertRaises(openai.BadRequestError) as err:  # not a string: a 400 naming it (it was a 500)
            self.c.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0], extra_body={"encoding_format": 5})
        self.assertIn("encoding_format", str(err.exception))

    def test_agents_sdk_workflow(self):
        import agents_workflow  # the same script runs against llama-server: scripts/peer_agents.sh
        steps = agents_workflow.run(self.srv.url, self.model)
        for s in steps:
            print(f"  {s['step']}: {'ok' if s['ok'] else 'FAILED'} ({s['detail']})")
        self.assertTrue(all(s["ok"] for s in steps), steps)

if __name__ == "__main__":
    unittest.main(verbosity=2)
