"""Course subscriptions, the Dynamic Consistency Boundary example, ported
(examples/ports/courses.py), on SQLite and PostgreSQL: two invariants kept in two
aggregates (a course's seats, a student's course count) hold under racing subscriptions,
checked on answers AND on what is stored (both streams, the rows, a rebuild of them)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from _support import together

from examples.ports.courses import (
    MAX_SUBSCRIPTIONS,
    ChangeCapacity,
    Course,
    CourseCapacityChanged,
    CourseDefined,
    CoursesOf,
    DefineCourse,
    RegisterStudent,
    SeatsLeft,
    Student,
    StudentRegistered,
    StudentSubscribed,
    Subscribe,
    SubscribedToCourse,
    Subscription,
    change_capacity,
    courses,
    courses_of,
    define_course,
    register_student,
    seats_left,
    subscribe,
)
from kumiko_typed import App, Failure, Ok, User


@pytest.fixture
def app(app_on: Callable[..., App]) -> App:
    return app_on([courses])


@pytest.fixture
def registrar() -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


def course(app: App, user: User, title: str = "Algebra", capacity: int = 2) -> uuid.UUID:
    result = app.dispatch(define_course, DefineCourse(title, capacity), user=user)
    assert isinstance(result, Ok), result
    made: uuid.UUID = result.data
    return made


def student(app: App, user: User, name: str = "Ada") -> uuid.UUID:
    result = app.dispatch(register_student, RegisterStudent(name), user=user)
    assert isinstance(result, Ok), result
    made: uuid.UUID = result.data
    return made


def subscribed(app: App, user: User, course_id: uuid.UUID, student_id: uuid.UUID) -> None:
    result = app.dispatch(subscribe, Subscribe(course_id, student_id), user=user)
    assert isinstance(result, Ok), result


def seats(app: App, user: User, course_id: uuid.UUID) -> int:
    result = app.query(seats_left, SeatsLeft(course_id), user=user)
    assert isinstance(result, Ok), result
    left: int = result.data
    return left


def subscriptions(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(Subscription.__table__)).scalar_one())


def test_a_subscription_takes_a_seat_and_is_on_both_streams(app: App, registrar: User) -> None:
    algebra, ada = course(app, registrar), student(app, registrar)
    assert app.dispatch(subscribe, Subscribe(algebra, ada), user=registrar) == Ok(1)
    assert seats(app, registrar, algebra) == 1
    assert app.query(courses_of, CoursesOf(ada), user=registrar) == Ok(["Algebra"])

    on_course = app.read_stream(Course, algebra, user=registrar)
    on_student = app.read_stream(Student, ada, user=registrar)
    assert isinstance(on_course, Ok) and isinstance(on_student, Ok)
    assert [e.event for e in on_course.data] == [CourseDefined("Algebra", 2), StudentSubscribed(ada)]
    assert [e.event for e in on_student.data] == [StudentRegistered("Ada"), SubscribedToCourse(algebra)]
    for entity in (Course, Student, Subscription):
        check = app.rebuild_projection(entity, user=registrar, verify=True)
        assert isinstance(check, Ok) and check.data.matches, (entity, check)


def test_a_full_course_a_second_seat_and_a_student_at_the_limit_are_refused_writing_nothing(
    app: App, registrar: User
) -> None:
    algebra = course(app, registrar, capacity=1)
    ada, bob = student(app, registrar), student(app, registrar, "Bob")
    assert app.dispatch(subscribe, Subscribe(algebra, ada), user=registrar) == Ok(0)

    again = app.dispatch(subscribe, Subscribe(algebra, ada), user=registrar)
    assert again == Failure(
        "unprocessable",
        "the student is already subscribed to this course",
        [{"path": "$.course_id", "message": "Ada holds a seat in it"}],
    )
    full = app.dispatch(subscribe, Subscribe(algebra, bob), user=registrar)
    assert full == Failure(
        "unprocessable", "the course is full", [{"path": "$.course_id", "message": "all 1 seats are taken"}]
    )

    for n in range(MAX_SUBSCRIPTIONS):
        subscribed(app, registrar, course(app, registrar, f"C{n:02}"), bob)
    one_more = app.dispatch(subscribe, Subscribe(course(app, registrar, "Z"), bob), user=registrar)
    assert one_more == Failure(
        "unprocessable",
        "the student holds too many courses",
        [{"path": "$.student_id", "message": f"at most {MAX_SUBSCRIPTIONS} courses at once"}],
    )
    assert subscriptions(app) == 1 + MAX_SUBSCRIPTIONS
    listed = app.query(courses_of, CoursesOf(bob), user=registrar)
    assert listed == Ok([f"C{n:02}" for n in range(MAX_SUBSCRIPTIONS)])


def test_the_capacity_cannot_go_below_the_students_subscribed(app: App, registrar: User) -> None:
    algebra = course(app, registrar, capacity=3)
    for name in ("Ada", "Bob"):
        subscribed(app, registrar, algebra, student(app, registrar, name))
    cut = app.dispatch(change_capacity, ChangeCapacity(algebra, 1), user=registrar)
    assert cut == Failure(
        "unprocessable",
        "the course has more students than that",
        [{"path": "$.capacity", "message": "2 students are subscribed; the capacity cannot go below that, not 1"}],
    )
    assert app.dispatch(change_capacity, ChangeCapacity(algebra, 2), user=registrar) == Ok(2)
    assert seats(app, registrar, algebra) == 0
    stream = app.read_stream(Course, algebra, user=registrar)
    assert isinstance(stream, Ok) and stream.data[-1].event == CourseCapacityChanged(2)


def test_unknown_and_another_tenants_courses_and_students_do_not_exist(app: App, registrar: User) -> None:
    algebra, ada = course(app, registrar), student(app, registrar)
    other = User(id=registrar.id, tenant_id=uuid.uuid4())
    theirs_course, theirs_student = course(app, other, "Theirs"), student(app, other, "Eve")
    for payload in (
        Subscribe(uuid.uuid4(), ada),
        Subscribe(algebra, uuid.uuid4()),
        Subscribe(theirs_course, ada),
        Subscribe(algebra, theirs_student),
    ):
        refused = app.dispatch(subscribe, payload, user=registrar)
        assert isinstance(refused, Failure) and refused.code == "not_found", (payload, refused)
    assert subscriptions(app) == 0
    # A subscription in the other tenant is not listed here, though its ids are known.
    assert isinstance(app.dispatch(subscribe, Subscribe(theirs_course, theirs_student), user=other), Ok)
    assert app.query(courses_of, CoursesOf(ada), user=registrar) == Ok([])
    assert app.query(courses_of, CoursesOf(theirs_student), user=other) == Ok(["Theirs"])
    assert isinstance(app.query(courses_of, CoursesOf(theirs_student), user=registrar), Failure)


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ({"title": "", "capacity": 1}, "$.title", "Length of 'title' must be >= 1: 0"),
        ({"title": "A", "capacity": 0}, "$.capacity", "capacity must be positive"),
        ({"title": "A", "capacity": "many"}, "$.capacity", None),
        ({"title": "A"}, "$.capacity", None),
    ],
)
def test_a_course_from_json_is_refused_at_its_field(
    app: App, registrar: User, body: dict[str, object], path: str, message: str | None
) -> None:
    refused = app.dispatch_json("courses:course:define", body, user=registrar)
    assert isinstance(refused, Failure) and refused.code == "validation_error", refused
    assert [d["path"] for d in refused.details] == [path]
    if message is not None:
        assert refused.details[0]["message"] == message
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(Course.__table__)).scalar_one() == 0


# --- racing subscriptions -------------------------------------------------------------------


def _until_decided(app: App, user: User, payload: Subscribe) -> str:
    """Subscribe as a client does: again on a ``version_conflict`` (a fresh read), until
    the answer is a decision; its code."""
    for _ in range(50):
        result = app.dispatch(subscribe, payload, user=user)
        if not (isinstance(result, Failure) and result.code == "version_conflict"):
            return "ok" if isinstance(result, Ok) else result.code
    raise AssertionError(f"{payload} lost the race 50 times")


def test_racing_students_never_overfill_a_course(app: App, registrar: User) -> None:
    """Six students race for three seats: exactly three get one, and the course's row,
    stream and subscriptions agree."""
    algebra = course(app, registrar, capacity=3)
    racers = [student(app, registrar, f"S{n}") for n in range(6)]
    codes = Counter(together(*(lambda s=s: _until_decided(app, registrar, Subscribe(algebra, s)) for s in racers)))
    assert codes == Counter({"ok": 3, "unprocessable": 3})
    assert seats(app, registrar, algebra) == 0 and subscriptions(app) == 3
    stream = app.read_stream(Course, algebra, user=registrar)
    assert isinstance(stream, Ok)
    assert sum(isinstance(e.event, StudentSubscribed) for e in stream.data) == 3


def test_one_student_racing_into_several_courses_stops_at_the_limit(app: App, registrar: User) -> None:
    """A student one course short of the limit subscribes to three at once: one succeeds,
    whatever the interleaving, though each course has room."""
    ada = student(app, registrar)
    for n in range(MAX_SUBSCRIPTIONS - 1):
        subscribed(app, registrar, course(app, registrar, f"C{n}"), ada)
    wanted = [course(app, registrar, f"W{n}") for n in range(3)]
    codes = Counter(together(*(lambda w=w: _until_decided(app, registrar, Subscribe(w, ada)) for w in wanted)))
    assert codes == Counter({"ok": 1, "unprocessable": 2})
    listed = app.query(courses_of, CoursesOf(ada), user=registrar)
    assert isinstance(listed, Ok) and len(listed.data) == MAX_SUBSCRIPTIONS
    check = app.rebuild_projection(Student, user=registrar, verify=True)
    assert isinstance(check, Ok) and check.data.matches, check


def test_a_capacity_cut_racing_the_last_seat_never_leaves_more_students_than_seats(app: App, registrar: User) -> None:
    algebra = course(app, registrar, capacity=2)
    subscribed(app, registrar, algebra, student(app, registrar))
    bob = student(app, registrar, "Bob")

    def cut() -> str:
        for _ in range(50):
            result = app.dispatch(change_capacity, ChangeCapacity(algebra, 1), user=registrar)
            if not (isinstance(result, Failure) and result.code == "version_conflict"):
                return "ok" if isinstance(result, Ok) else result.code
        raise AssertionError("the cut lost the race 50 times")

    answers = together(cut, lambda: _until_decided(app, registrar, Subscribe(algebra, bob)))
    # Whichever decided first, the other was decided on what it wrote.
    assert sorted(map(str, answers)) == ["ok", "unprocessable"]
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(Course.capacity, Course.subscribers).where(Course.id == algebra)).one()
    assert row.subscribers <= row.capacity
    assert (row.capacity, row.subscribers) in {(1, 1), (2, 2)}
