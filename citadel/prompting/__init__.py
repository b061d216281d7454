"""What a generator is handed: the numbered sources (`source.py`) and the budgeted, fenced prompt built
from them (`prompt.py`: the parts, their allowances and cap, `PromptAssembler`, `AssembledPrompt`).

Below both the answer service (citadel/answer/, which chooses and expands the sources) and the
generator backends (citadel/generation/, which send the prompt), so neither imports the other's types.
"""
