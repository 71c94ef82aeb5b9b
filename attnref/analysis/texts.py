"""The sentences the trained models of chapter 6 read: written for this book, the same for every model.

Sixty-four English sentences of 3 to about 60 words on everyday life, science, history,
economics, sport, cooking, travel, technology, law, medicine, music and nature; questions,
commands, lists, numbers, quotations and a little dialogue among them, so that the tokens a
head sees are not all of one kind. They were written for the book (no corpus, no model output)
and are fixed: a statistic over them is a statistic over *this* set. The book treats the
sentences as independent draws only to put bootstrap intervals on its statistics; the intervals
describe how much a statistic moves when the set is resampled, not how it would move on text
of another genre, language or length.
"""

from __future__ import annotations

#: The text set, in a fixed order (``SENTENCES[0]`` is the example the chapter shows).
SENTENCES: tuple[str, ...] = (
    "The cat slept on the warm windowsill all afternoon.",
    "Rain.",
    "Close the door, please.",
    "Where did you leave the keys?",
    "A small boat drifted slowly across the quiet lake at dawn.",
    "She forgot her umbrella, so she waited under the bridge until the rain stopped.",
    "Interest rates rose again in March, and mortgage applications fell by 12 percent.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "He repaired the bicycle chain with a borrowed wrench and some patience.",
    "The orchestra rehearsed the symphony twice before the evening concert.",
    "Volcanic ash grounded hundreds of flights across northern Europe.",
    "My grandmother still writes letters by hand to her friends abroad.",
    "Add the onions only when the oil is hot enough to make them sizzle.",
    "The striker scored twice in the second half, and the home crowd finally stopped complaining "
    "about the coach.",
    "Is it true that octopuses have three hearts?",
    "Please submit the signed form no later than Friday at noon.",
    "The court ruled that the contract was void because one party had been misled about the price.",
    "Glaciers in the Alps have lost roughly half of their volume since the middle of the "
    "nineteenth century.",
    "Our train was cancelled, so we spent the night in a tiny hotel next to the station and "
    "caught the first bus in the morning.",
    "The patient reported a mild headache, a dry cough and a slight fever that had lasted three days.",
    "Compile the program again after you change the header file.",
    "Nobody expected the quiet librarian to win the chess tournament.",
    "In 1969 two astronauts walked on the Moon while a third one orbited above them.",
    "Bees communicate the direction of flowers with a dance.",
    "The new bridge will carry four lanes of traffic and a separate path for cyclists.",
    "Thank you!",
    "If the temperature drops below freezing, the pipes in the garage may burst.",
    "The museum's oldest map shows a coastline that no longer exists.",
    "He said, \"I will be there by seven,\" and then arrived at half past nine.",
    "Inflation erodes the value of savings that earn no interest.",
    "The children built a fort out of cardboard boxes and old blankets.",
    "Water boils at a lower temperature on a high mountain because the air pressure is lower.",
    "The committee postponed its decision until the auditors had finished their report on the "
    "missing funds.",
    "A good password is long, unique, and stored in a password manager rather than on a sticky "
    "note.",
    "Turn left at the bakery, walk two blocks, and the library is on your right.",
    "The violinist tuned her instrument while the audience found their seats.",
    "Antibiotics do not work against viruses.",
    "During the long winter the village relied on a single road that the snow often closed for "
    "days, so families kept their cellars full of potatoes, apples and firewood.",
    "The spacecraft sent back images of a moon covered in ice.",
    "Why do leaves change colour in autumn?",
    "Sales of electric cars doubled last year, although they remain a small share of the market.",
    "The old lighthouse keeper knew every rock along the coast.",
    "Mix the paint thoroughly before you start on the second wall.",
    "The jury took less than an hour to reach a verdict.",
    "Our neighbour's dog barks at the postman every single morning.",
    "A prime number has exactly two divisors: one and itself.",
    "The farmers hoped for rain, but the clouds passed over the valley without a drop.",
    "The software update fixed the crash but made the battery drain faster.",
    "She learned to play the piano at forty and gave her first recital at fifty.",
    "Migrating birds navigate using the sun, the stars and the Earth's magnetic field.",
    "The hospital opened a new ward for children with rare diseases.",
    "Wait here.",
    "The treaty ended a war that had lasted more than thirty years and redrew the borders of half "
    "the continent.",
    "Fresh bread, strong coffee and a newspaper: that was his idea of a perfect Sunday.",
    "The engineers tested the dam by slowly raising the water level over several weeks.",
    "Please keep your seatbelt fastened while the sign is on.",
    "Most of the universe consists of dark matter and dark energy, which no telescope has seen "
    "directly.",
    "The detective noticed that the clock in the hall had stopped at a quarter past two.",
    "He planted tomatoes, beans and sunflowers along the fence.",
    "The price of the ticket includes a guided tour of the castle and a boat trip on the river.",
    "When the power failed, the whole street came outside to look at the stars.",
    "Vaccines train the immune system to recognise a pathogen before it causes disease.",
    "After years of careful restoration, the painting was finally returned to the chapel where it "
    "had hung for four centuries, and the townspeople lined the streets to watch it arrive.",
)
