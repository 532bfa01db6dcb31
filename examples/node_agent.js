// The tool task's calculator agent in JavaScript (Node 18+, no packages), both ways rlvr runs a
// command (rlvr.agents.command):
//   env.agent_protocol=once: a process per episode, RLVR_BASE_URL and RLVR_MODEL set, the problem as
//     JSON on standard input; rlvr grades what it prints last.
//   env.agent_protocol=lines (RLVR_PROTOCOL=lines): one process runs many episodes at once, each a JSON
//     line {episode, base_url, model, problem} on standard input, answered by a line {episode, result}.
//   rlvr train --config configs/agent_tool_arithmetic.yaml env.agent= \
//     env.agent_command="node examples/node_agent.js" env.agent_protocol=lines
const CALCULATOR = {
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluate an arithmetic expression exactly.",
    parameters: {
      type: "object",
      required: ["expression"],
      properties: { expression: { type: "string", description: "Numbers with + - * / and parentheses." } },
    },
  },
};
const MAX_TURNS = 3;

function calculate(expression) {
  const text = String(expression).trim().slice(0, 200);
  if (!/^[0-9+\-*/(). ]+$/.test(text)) return "error: not an arithmetic expression";
  try {
    const value = Function(`"use strict"; return (${text});`)();
    return Number.isFinite(value) ? String(Math.round(value * 1e9) / 1e9) : "error: no finite value";
  } catch (e) {
    return `error: ${e.name}: ${e.message}`;
  }
}

async function ask(baseUrl, model, messages) {
  const response = await fetch(`${baseUrl}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, messages, tools: [CALCULATOR] }),
  });
  if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
  return (await response.json()).choices[0].message;
}

async function solve(baseUrl, model, problem) {
  const messages = [{ role: "user", content: problem.prompt }];
  let message;
  for (let turn = 0; turn < MAX_TURNS; turn++) {
    message = await ask(baseUrl, model, messages);
    if (!message.tool_calls || message.tool_calls.length === 0) break;
    messages.push(message);
    for (const call of message.tool_calls) {
      let answer;
      try {
        answer = calculate(JSON.parse(call.function.arguments).expression);
      } catch (e) {
        answer = `error: ${e.name}: ${e.message}`;
      }
      messages.push({ role: "tool", tool_call_id: call.id, content: answer });
    }
  }
  return { answer: message.content || "" };
}

async function once() {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const result = await solve(process.env.RLVR_BASE_URL, process.env.RLVR_MODEL, JSON.parse(input));
  console.log(JSON.stringify(result));
}

async function lines() {
  const reader = require("node:readline").createInterface({ input: process.stdin });
  for await (const line of reader) {
    const { episode, base_url, model, problem } = JSON.parse(line);
    solve(base_url, model, problem).then(
      (result) => console.log(JSON.stringify({ episode, result })),
      (error) => console.log(JSON.stringify({ episode, error: String(error) })),
    );
  }
}

(process.env.RLVR_PROTOCOL === "lines" ? lines : once)();
