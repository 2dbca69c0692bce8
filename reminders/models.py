"""The vazifalar tables as SQLAlchemy ORM classes: English in Python, Uzbek in the database."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import BigInteger, Boolean, DateTime, ForeignKey, Identity, Integer, Text, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = ["DEFAULT_TIME_ZONE", "Base", "HandledUpdate", "PressedReminder", "Task", "User"]

DEFAULT_TIME_ZONE = "Asia/Tashkent"


class Base(DeclarativeBase):
    # Read server defaults (ids, creation times) back with INSERT ... RETURNING instead of a
    # second SELECT when they are first used.
    __mapper_args__ = {"eager_defaults": True}  # noqa: RUF012 - SQLAlchemy reads a plain dict


class User(Base):
    """A person who receives reminders in one Telegram chat."""

    __tablename__ = "foydalanuvchi"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    name: Mapped[str] = mapped_column("ism", Text)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    time_zone: Mapped[str] = mapped_column("vaqt_zonasi", Text, server_default=DEFAULT_TIME_ZONE)
    # False once Telegram said the person blocked the bot (set by the relay-outcome trigger).
    active: Mapped[bool] = mapped_column("faol", Boolean, server_default="true")
    created_at: Mapped[datetime] = mapped_column(
        "yaratilgan", DateTime(timezone=True), server_default=func.now()
    )

    tasks: Mapped[list[Task]] = relationship(back_populates="user", passive_deletes=True)

    def __repr__(self) -> str:
        return f"User(id={self.id!r}, name={self.name!r}, time_zone={self.time_zone!r})"


class Task(Base):
    """Something to do by a due time, with reminders some offsets before it."""

    __tablename__ = "vazifa"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        "foydalanuvchi_id", BigInteger, ForeignKey("foydalanuvchi.id", ondelete="CASCADE")
    )
    title: Mapped[str] = mapped_column("sarlavha", Text)
    due: Mapped[datetime] = mapped_column("muddat", DateTime(timezone=True))
    # Seconds before ``due``; the column stays integer[] so plain SQL can read it.
    remind_before_seconds: Mapped[list[int]] = mapped_column(
        "eslatma_oldin", ARRAY(Integer), server_default="{3600}"
    )
    done: Mapped[bool] = mapped_column("bajarildi", Boolean, server_default="false")
    # How many times the task was put off ("Keyinroq"): each put-off reminder has its own key.
    snoozes: Mapped[int] = mapped_column("kechiktirish", Integer, server_default="0")
    created_at: Mapped[datetime] = mapped_column(
        "yaratilgan", DateTime(timezone=True), server_default=func.now()
    )

    user: Mapped[User] = relationship(back_populates="tasks")

    @property
    def remind_before(self) -> tuple[timedelta, ...]:
        return tuple(timedelta(seconds=s) for s in self.remind_before_seconds)

    def __repr__(self) -> str:
        return (
            f"Task(id={self.id!r}, user_id={self.user_id!r}, due={self.due!r}, done={self.done!r})"
        )


class HandledUpdate(Base):
    """A Telegram update the bot has acted on, written in the transaction of its change."""

    __tablename__ = "bot_yangilanish"

    bot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    update_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(
        "olingan", DateTime(timezone=True), server_default=func.now()
    )


class PressedReminder(Base):
    """A reminder message whose button was pressed, and what the press did."""

    __tablename__ = "eslatma_javob"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    message_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    action: Mapped[str] = mapped_column("amal", Text)
    pressed_at: Mapped[datetime] = mapped_column(
        "vaqt", DateTime(timezone=True), server_default=func.now()
    )
