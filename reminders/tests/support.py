"""Helpers for tests of the vazifalar bot: bot processes, and people who write to the bot."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from outbox_testing.fake_telegram import Delivered, FakeTelegram
from outbox_testing.fake_telegram.checks import MAX_TEXT_LENGTH, parse_html
from tests.support import wait_until

__all__ = ["BotProcess", "Person", "bot_processes", "telegram_accepts"]


def telegram_accepts(html_text: str) -> bool:
    """Whether Telegram would take ``html_text`` as a message (parse mode HTML), by the fake's
    own checks."""
    plain, problem = parse_html(html_text)
    return problem is None and len(plain.strip()) > 0 and len(plain) <= MAX_TEXT_LENGTH


class BotProcess:
    """``reminders bot`` in a process of its own; output goes to files."""

    def __init__(self, env: Mapping[str, str], log_dir: Path, name: str, *args: str) -> None:
        self.name = name
        self.stderr_path = log_dir / f"{name}.err"
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reminders", "bot", *args],
                env=dict(env),
                stdout=err,
                stderr=subprocess.STDOUT,
                cwd=log_dir,
            )

    @property
    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"{self.name} did not stop on SIGTERM\n{self.log}") from None


@contextlib.contextmanager
def bot_processes(
    env: Mapping[str, str], log_dir: Path, fake: FakeTelegram, count: int = 1
) -> Iterator[list[BotProcess]]:
    """``count`` bots, each polling the fake before this yields; all stopped afterwards."""
    bots: list[BotProcess] = []
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(count):
            before = _polls(fake)
            bot = BotProcess(env, log_dir, f"bot{i + 1}")
            bots.append(bot)

            def polling(bot: BotProcess = bot, before: int = before) -> bool:
                return _polls(fake) > before or bot.proc.poll() is not None

            wait_until(polling, 30, "the bot's first getUpdates")
            assert bots[-1].proc.poll() is None, bots[-1].log
        yield bots
    finally:
        for bot in bots:
            with contextlib.suppress(AssertionError):
                bot.stop()


def _polls(fake: FakeTelegram) -> int:
    return sum(r.method == "getUpdates" for r in fake.requests)


class Person:
    """Someone in a private chat with the bot (the chat id is their user id)."""

    def __init__(self, fake: FakeTelegram, chat_id: int, name: str = "Aziza") -> None:
        self.fake, self.chat_id, self.name = fake, chat_id, name

    def received(self) -> list[Delivered]:
        return self.fake.delivered_to(self.chat_id)

    def wait_for_messages(self, count: int, timeout: float = 15.0) -> list[Delivered]:
        return wait_until(
            lambda: (got := self.received())[count - 1 :] and got,
            timeout,
            f"{count} messages in chat {self.chat_id}",
            explain=lambda: "\n".join(m.text for m in self.received()),
        )

    def say(self, text: str, timeout: float = 15.0) -> str:
        """Write ``text`` and return the bot's reply: the next message without buttons (a
        reminder, which has them, may come in between)."""
        before = len(self.received())
        self.fake.post_message(self.chat_id, text, first_name=self.name)
        replies = wait_until(
            lambda: [m for m in self.received()[before:] if m.reply_markup is None],
            timeout,
            f"the reply to {text!r}",
            explain=lambda: "\n".join(m.text for m in self.received()),
        )
        return str(replies[0].text)

    def press(
        self, message: Delivered, text_starts: str, *, edits: bool = True, timeout: float = 15.0
    ) -> str:
        """Press the button whose label starts with ``text_starts``; return the callback answer.

        With ``edits`` wait for the bot's edit of the message too (it follows the answer).
        """
        markup = message.reply_markup or {}
        buttons = [b for row in markup.get("inline_keyboard", []) for b in row]
        [button] = [b for b in buttons if b["text"].startswith(text_starts)]
        edited_before = self._edits_of(message)
        query_id = self.fake.press_button(
            message.chat_id, message.message_id, data=button["callback_data"]
        )
        answer = wait_until(
            lambda: [a for a in self.fake.callback_answers if a.callback_query_id == query_id],
            timeout,
            "the answer to the button press",
        )
        if edits:
            wait_until(
                lambda: self._edits_of(message) > edited_before, timeout, "the reminder's edit"
            )
        return str(answer[0].text)

    def _edits_of(self, message: Delivered) -> int:
        return sum(
            e.chat_id == message.chat_id and e.message_id == message.message_id
            for e in self.fake.edits
        )
