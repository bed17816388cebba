"""The multi-agent workflow of issue 41 with the OpenAI Agents SDK (`openai-agents`, unchanged), against
any OpenAI-compatible server: chorus in tests/server/serve_tools_test.py, llama-server (the peer) in
scripts/peer_agents.sh. Three steps, each run and judged on its own so a server that fails one still
shows the others: a hand-off (triage -> researcher), two tools called in one model response, and a
pydantic-typed structured output. Greedy decoding and tool_choice "required" (the framework's own
settings) make the run repeatable: what is under test is the protocol, not the model's judgment.

Run alone: python3 tests/server/agents_workflow.py BASE_URL [MODEL]  -> one JSON line per step
"""
import asyncio
import json
import sys


def run(base_url, model, max_tokens=120):
    import openai
    from pydantic import BaseModel
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool,
                        set_tracing_disabled)
    from agents.items import HandoffCallItem
    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(("get_weather", city))
        return f"sunny, 21 C in {city}"

    @function_tool
    def get_time(city: str) -> str:
        """The local time in a city."""
        calls.append(("get_time", city))
        return f"10:30 in {city}"

    class Report(BaseModel):
        city: str
        summary: str

    llm = OpenAIChatCompletionsModel(model=model, openai_client=openai.AsyncOpenAI(
        base_url=base_url, api_key="-", max_retries=0, timeout=600))
    settings = dict(temperature=0.0, max_tokens=max_tokens)
    researcher = Agent(name="researcher", instructions="Use both tools: get_weather and get_time for the city.",
                       tools=[get_weather, get_time], model=llm,
                       model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=True, **settings))
    triage = Agent(name="triage", instructions="Hand the question to the researcher.", handoffs=[researcher],
                   model=llm, model_settings=ModelSettings(tool_choice="required", **settings))
    writer = Agent(name="writer", instructions="Write a short report.", output_type=Report, model=llm,
                   model_settings=ModelSettings(**settings))
    question = "What is the weather and the time in Paris?"
    steps = []


    async def handoff():
        r = await Runner.run(triage, question, max_turns=6)
        handed = any(isinstance(i, HandoffCallItem) for i in r.new_items)
        return handed and r.last_agent.name == "researcher", f"last agent {r.last_agent.name}, handoff {handed}"

    async def parallel():
        calls.clear()
        r = await Runner.run(researcher, question, max_turns=3)
        per = [[o.name for o in resp.output if getattr(o, "type", "") == "function_call"] for resp in r.raw_responses]
        both = any({"get_weather", "get_time"} <= set(n) for n in per)
        return both, f"calls per response {per}"

    async def structured():
        r = await Runner.run(writer, question + " Report on Paris.", max_turns=2)
        return isinstance(r.final_output, Report), repr(r.final_output)[:200]

    async def all_steps():  # one event loop: the client's connections belong to it
        for name, fn in [("hand-off", handoff), ("two tools in one response", parallel),
                         ("pydantic structured output", structured)]:
            try:
                ok, detail = await fn()
            except Exception as e:  # the step failed: record why, go on
                ok, detail = False, f"{type(e).__name__}: {str(e)[:200]}"
            steps.append({"step": name, "ok": bool(ok), "detail": detail})

    asyncio.run(all_steps())
    return steps


if __name__ == "__main__":
    for s in run(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "model"):
        print(json.dumps(s))
